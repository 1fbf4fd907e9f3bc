"""Agents that a run names by reference (`path/to/agents.py:attr`): kept self-contained,
because the loader imports this file by its path, outside any package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner import Agent

MODEL_CALLS: list[int] = []  # one item per model call, to count them across a reload


def add(a: float, b: float) -> float:
    return a + b


def solver(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    MODEL_CALLS.append(len(transcript))
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "add", "args": {"b": 3, "a": 2}}
    return {"type": "final", "content": seen[-1]["content"]}


solver_agent = Agent(solver, {"add": add}, name="solver", release="r1")

SOLVER_REF = f"{Path(__file__).resolve()}:solver_agent"
