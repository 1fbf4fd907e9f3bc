"""The agents of benchmarks/crash_soak.py's scenario E: randomised trees of sub-agents.

A run's shape comes from its task alone, so every worker, and every resume after a kill,
makes the same moves:

- `root` (task `t<seed>-<n>`) hands 1 to 4 tasks at once to `branch` or `leaf` sub-agents
  (children running at once), then answers;
- `branch` hands 1 to 4 tasks at once to `leaf` sub-agents, then answers;
- `leaf` calls `work` 1 to 6 times, then answers.

Each model call takes 0.05 to 0.4 s, reports 30 to 220 tokens (drawn from its task and
turn) and states `max_tokens = 150`: runner's estimate (the prompt at four characters a
token, plus 150) is below the usage now and then, an estimation error the soak accounts
for. Each call appends one JSON line to the file named by RUNNER_SOAK_LEDGER as it returns:
its task, turn, start and end (epoch seconds), usage and runner's estimate, and its process.
Loaded by path (`benchmarks/soak_agents.py:root`) by `runner worker` processes.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from runner import Agent
from runner.core.limits import estimate_tokens
from runner.testing import FunctionModel, tool_results, turns

LEDGER_VARIABLE = "RUNNER_SOAK_LEDGER"
MAX_TOKENS = 150


class SoakModel(FunctionModel):
    """A FunctionModel that states its output allowance (runner's estimate reads it)."""

    max_tokens = MAX_TOKENS


def _timed(moves: Any) -> SoakModel:
    def call(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        task, turn = transcript[0]["content"], turns(transcript)
        rng = random.Random(f"{task}:{turn}")
        started = time.time()
        time.sleep(rng.uniform(0.05, 0.4))
        move: dict[str, Any] = moves(transcript, task, turn)
        move["usage"] = rng.randint(30, 220)
        path = os.environ.get(LEDGER_VARIABLE)
        if path:
            line = {
                "task": task,
                "turn": turn,
                "start": started,
                "end": time.time(),
                "usage": move["usage"],
                "estimate": estimate_tokens(transcript, MAX_TOKENS),
                "pid": os.getpid(),
            }
            with open(path, "a") as ledger:
                ledger.write(json.dumps(line) + "\n")
        return move

    return SoakModel(call)


def _fan_out(kinds: tuple[str, ...]) -> SoakModel:
    def moves(transcript: list[dict[str, Any]], task: str, turn: int) -> dict[str, Any]:
        if turn == 0:
            rng = random.Random(f"{task}:shape")
            calls = [
                {"name": rng.choice(kinds), "args": {"task": f"{task}.{n}"}}
                for n in range(rng.randint(1, 4))
            ]
            return {"type": "tool", "calls": calls}
        return {"type": "final", "content": f"{task}: {len(tool_results(transcript))} done"}

    return _timed(moves)


def _leaf(transcript: list[dict[str, Any]], task: str, turn: int) -> dict[str, Any]:
    if turn < random.Random(f"{task}:calls").randint(1, 6):
        return {"type": "tool", "name": "work", "args": {"n": turn}}
    return {"type": "final", "content": f"{task} done"}


def work(n: int) -> str:
    return f"worked {n}"


UNBOUNDED: dict[str, Any] = {"max_repeats": None, "max_depth": 5}
leaf = Agent(_timed(_leaf), {"work": work}, name="leaf", max_steps=20, **UNBOUNDED)
branch = Agent(
    _fan_out(("leaf",)), {"leaf": leaf.as_tool("leaf")}, name="branch", max_steps=20, **UNBOUNDED
)
root = Agent(
    _fan_out(("branch", "leaf")),
    {"branch": branch.as_tool("branch"), "leaf": leaf.as_tool("leaf")},
    name="root",
    max_steps=1000,
    **UNBOUNDED,
)
