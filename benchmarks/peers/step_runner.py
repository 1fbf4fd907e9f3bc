"""runner on the peers' workload: N steps of one `echo` tool call, then the final answer.

    python step_runner.py memory|sqlite|postgresql TARGET N RUNS

Durable with `Runner.run` on SQLite (TARGET a file: runner's default URL, WAL and
synchronous=FULL, read back) or PostgreSQL (TARGET a migrated database's SQLAlchemy URL);
`memory` runs `run_agent`, no database at all (TARGET ignored), with runner's default
`model_timeout`, so each model call is handed to a spare thread as in a durable run.
Runs under runner's own venv.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from typing import Any

from workload import Clock, emit, measure, remove_sqlite

from runner import Agent, Runner, run_agent

# No budget ends these runs early: only the model's final answer does.
BUDGETS: dict[str, Any] = {
    "max_steps": 10**6,
    "max_tokens": None,
    "max_consecutive_errors": None,
    "max_repeats": None,
}


def make_agent(n: int) -> Agent:
    def model(transcript: list[Any]) -> dict[str, Any]:
        done = (len(transcript) - 1) // 2
        if done >= n:
            return {"type": "final", "content": f"done {done}"}
        return {"type": "tool", "name": "echo", "args": {"i": done}}

    def echo(i: int) -> str:
        return f"echo result {i}"

    return Agent(model, {"echo": echo}, name="peers", **BUDGETS)


def main() -> None:
    mode, target = sys.argv[1], sys.argv[2]
    n, runs = int(sys.argv[3]), int(sys.argv[4])
    agent = make_agent(n)
    info: dict[str, Any] = {}
    one_run: Callable[[], tuple[float, float]]
    if mode == "memory":

        def one_run() -> tuple[float, float]:
            clock = Clock()
            result = run_agent(agent.model, agent.tools, "go", **BUDGETS)
            elapsed = clock.since()
            assert result.stop_reason == "final", result
            return elapsed

    else:
        if mode == "sqlite":
            remove_sqlite(target)
            url = f"sqlite:///{target}"
        else:
            url = target
        runner = Runner(url)
        if mode == "sqlite":
            with runner.engine.connect() as c:
                info = {
                    "journal_mode": c.exec_driver_sql("PRAGMA journal_mode").scalar(),
                    "synchronous": c.exec_driver_sql("PRAGMA synchronous").scalar(),
                }

        def one_run() -> tuple[float, float]:
            clock = Clock()
            result = runner.run(agent, "go", id="b" + uuid.uuid4().hex[:16])
            elapsed = clock.since()
            assert result.stop_reason == "final" and result.steps == n + 1, result
            return elapsed

    emit({"db": mode, "n": n, "runs": runs, "info": info, **measure(one_run, n, runs)})


if __name__ == "__main__":
    main()
