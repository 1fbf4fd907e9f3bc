"""A real tree of durable runs for the tests of what shows it (the CLI, the page): child runs
inserted as a sub-agent's call inserts them (with their parent's call key), each run to its
end by the Runner."""

from __future__ import annotations

from typing import Any

from runner import Agent, Runner
from runner.store.rows import new_run
from runner.testing import ScriptedModel, call

USAGE = {"tokens": 100, "cost": 0.25}


def answers(text_: str) -> Agent:
    """An agent that answers at once, spending 100 tokens."""
    return Agent(ScriptedModel([{"type": "final", "content": text_, "usage": USAGE}]), name="sub")


def delegating(calls: int) -> Agent:
    """An agent that calls `ask` `calls` times (100 tokens each), then answers."""
    moves: list[Any] = [{**call("ask", q=str(n)), "usage": USAGE} for n in range(calls)]
    moves.append({"type": "final", "content": "done", "usage": USAGE})
    return Agent(ScriptedModel(moves), {"ask": lambda q: f"asked {q}"}, name="boss")


def child(runner: Runner, parent_id: str, call_key: str, run_id: str) -> str:
    """A child run of `parent_id`, started by its call `call_key`: queued, as a sub-agent's
    call leaves it."""
    parent = runner.row(parent_id)
    row = new_run(
        run_id=run_id,
        agent=None,
        agent_name="sub",
        release=None,
        task=f"task of {run_id}",
        budgets=parent.budgets,
        at=runner.now(),
        parent_id=parent.id,
        root_id=parent.root_id,
        parent_call_key=call_key,
    )
    assert runner.store.create_run(row)
    return run_id


def build_tree(runner: Runner) -> None:
    """root (2 calls) -> a (1 call) -> a1; root -> b, left queued."""
    runner.run(delegating(2), "orchestrate", id="root")
    child(runner, "root", "root-1", "a")
    child(runner, "root", "root-2", "b")
    runner.resume("a", agent=delegating(1))
    child(runner, "a", "a-1", "a1")
    runner.resume("a1", agent=answers("leaf"))
