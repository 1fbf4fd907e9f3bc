"""The agents of benchmarks/sub_agents.py: a tree of sub-agents three levels deep.

`root` hands 4 tasks at once to `middle` sub-agents; each `middle` hands 5 at once to
`leaf` sub-agents (20 leaves in all); a leaf calls `work` once (it sleeps
RUNNER_BENCH_LEAF_SECONDS, and writes when it ran and in which process to the file
RUNNER_BENCH_TREE_LEDGER), then answers. Every model call reports 10 tokens. Loaded by path
(`benchmarks/tree_fakes.py:root`), by the benchmark and by `runner worker` processes.
"""

from __future__ import annotations

import os
import time
from typing import Any

from runner import Agent
from runner.testing import FunctionModel, tool_results, turns

LEDGER_VARIABLE = "RUNNER_BENCH_TREE_LEDGER"
SECONDS_VARIABLE = "RUNNER_BENCH_LEAF_SECONDS"
MIDDLES, LEAVES = 4, 5


def work(task: str) -> str:
    """A leaf's work: it takes a while, and says when it ran and where."""
    started = time.time()
    time.sleep(float(os.environ.get(SECONDS_VARIABLE, "0.3")))
    path = os.environ.get(LEDGER_VARIABLE)
    if path:
        with open(path, "a") as ledger:
            ledger.write(f"{started} {time.time()} {os.getpid()} {task}\n")
    return f"worked on {task}"


def _fan_out(tool: str, count: int) -> FunctionModel:
    def move(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        task = transcript[0]["content"]
        if turns(transcript) == 0:
            calls = [{"name": tool, "args": {"task": f"{task}.{n}"}} for n in range(count)]
            return {"type": "tool", "calls": calls, "usage": 10}
        done = len(tool_results(transcript))
        return {"type": "final", "content": f"{task}: {done} done", "usage": 10}

    return FunctionModel(move)


def _leaf(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    task = transcript[0]["content"]
    if turns(transcript) == 0:
        return {"type": "tool", "name": "work", "args": {"task": task}, "usage": 10}
    return {"type": "final", "content": f"{task} done", "usage": 10}


leaf = Agent(FunctionModel(_leaf), {"work": work}, name="leaf")
middle = Agent(
    _fan_out("leaf", LEAVES), {"leaf": leaf.as_tool("leaf")}, name="middle", max_steps=50
)
root = Agent(
    _fan_out("middle", MIDDLES),
    {"middle": middle.as_tool("middle")},
    name="root",
    max_steps=500,
    max_tokens=100_000,
)


# The cost of a sub-agent over a plain tool call (benchmarks/sub_agents.py, part 1): a
# caller makes CALLS calls one after the other, one a step, of a plain tool (`plain_caller`)
# or of a sub-agent that answers at once, one model call (`sub_caller`).
CALLS_VARIABLE = "RUNNER_BENCH_CALLS"


def _caller(tool: str) -> FunctionModel:
    def move(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        done = turns(transcript)
        if done < int(os.environ.get(CALLS_VARIABLE, "20")):
            return {"type": "tool", "name": tool, "args": {"task": f"call {done}"}, "usage": 10}
        return {"type": "final", "content": f"{done} calls", "usage": 10}

    return FunctionModel(move)


def echo(task: str) -> str:
    return f"did {task}"


def _answer(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "final", "content": f"{transcript[0]['content']} done", "usage": 10}


answerer = Agent(FunctionModel(_answer), name="answerer")
_LOTS: dict[str, Any] = {"max_steps": 10_000, "max_tokens": None, "max_repeats": None}
plain_caller = Agent(_caller("echo"), {"echo": echo}, name="plain-caller", **_LOTS)
sub_caller = Agent(_caller("echo"), {"echo": answerer.as_tool("echo")}, name="sub-caller", **_LOTS)
