"""LangGraph on the peers' workload, with its sync checkpointer.

    python step_lg.py sqlite|postgresql|none TARGET N RUNS

A two-node graph, model -> tool -> model ...: a run is N model supersteps and N tool
supersteps (the tool node ends it after the N-th call), invoked with durability="sync",
so each superstep's checkpoint is committed before the next starts. SQLite: SqliteSaver on
the file TARGET (its setup() sets WAL; synchronous set to FULL here, runner's setting, and
read back). PostgreSQL: PostgresSaver on the libpq URL TARGET (psycopg, autocommit).
`none`: the graph with no checkpointer. Runs under the peers' venv (README.md).
"""

from __future__ import annotations

import operator
import sys
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from workload import (
    Clock,
    Message,
    emit,
    fake_model,
    fake_tool,
    measure,
    remove_sqlite,
    tool_message,
)


class State(TypedDict):
    messages: Annotated[list[Message], operator.add]


def build_graph() -> StateGraph[Any]:
    def model(state: State, config: RunnableConfig) -> dict[str, Any]:
        msgs = state["messages"]
        return {"messages": [fake_model(msgs, (len(msgs) - 1) // 2)]}

    def tool(state: State, config: RunnableConfig) -> dict[str, Any]:
        call = state["messages"][-1]["tool_calls"][0]
        return {"messages": [tool_message(call, fake_tool(call))]}

    def after_tool(state: State, config: RunnableConfig) -> str:
        done = (len(state["messages"]) - 1) // 2
        return END if done >= config["configurable"]["n_steps"] else "model"

    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tool", tool)
    graph.add_edge(START, "model")
    graph.add_edge("model", "tool")
    graph.add_conditional_edges("tool", after_tool, ["model", END])
    return graph


def main() -> None:
    saver, target = sys.argv[1], sys.argv[2]
    n, runs = int(sys.argv[3]), int(sys.argv[4])
    graph = build_graph()
    info: dict[str, Any] = {}

    def timed(compiled: Any, options: dict[str, Any]) -> dict[str, Any]:
        def one_run() -> tuple[float, float]:
            config = {
                "configurable": {"thread_id": "t-" + uuid.uuid4().hex, "n_steps": n},
                "recursion_limit": 2 * n + 10,
            }
            clock = Clock()
            out = compiled.invoke(
                {"messages": [{"role": "user", "content": "go"}]}, config, **options
            )
            elapsed = clock.since()
            assert len(out["messages"]) == 1 + 2 * n
            return elapsed

        return measure(one_run, n, runs)

    if saver == "none":
        result = timed(graph.compile(), {})
    elif saver == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        remove_sqlite(target)
        with SqliteSaver.from_conn_string(target) as checkpointer:
            checkpointer.setup()
            checkpointer.conn.execute("PRAGMA synchronous=FULL")
            info = {
                "journal_mode": checkpointer.conn.execute("PRAGMA journal_mode").fetchone()[0],
                "synchronous": checkpointer.conn.execute("PRAGMA synchronous").fetchone()[0],
            }
            result = timed(graph.compile(checkpointer=checkpointer), {"durability": "sync"})
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target) as checkpointer:
            checkpointer.setup()
            result = timed(graph.compile(checkpointer=checkpointer), {"durability": "sync"})
    emit({"db": saver, "n": n, "runs": runs, "info": info, **result})


if __name__ == "__main__":
    main()
