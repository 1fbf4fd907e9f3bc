"""Agents that runs on the in-memory store name by reference (`path/to/file.py:attr`), as a
worker loads them: built on runner.testing's models, self-contained (the loader imports
this file by its path, outside any package)."""

from __future__ import annotations

from pathlib import Path

from runner import Agent
from runner.testing import FunctionModel, call, final, tool_results


def add(a: float, b: float) -> float:
    return a + b


# Seed 000's solver: add 2 and 3, then answer with what it returned.
solver = FunctionModel(
    lambda transcript: (
        final(tool_results(transcript)[-1]["content"])
        if tool_results(transcript)
        else call("add", a=2, b=3)
    )
)
solver_agent = Agent(solver, {"add": add}, name="solver", release="r1")

SOLVER = f"{Path(__file__).resolve()}:solver_agent"
