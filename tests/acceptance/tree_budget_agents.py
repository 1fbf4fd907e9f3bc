"""Agents for the tree-budget acceptance test (self-contained: a worker loads this file by
its path): `root` hands two tasks at once to `leaf` sub-agents, then answers; a leaf calls
`work` twice, then answers. Every model call reports 100 tokens and states max_tokens=50."""

from __future__ import annotations

from typing import Any

from runner import Agent
from runner.testing import FunctionModel, turns


class Model(FunctionModel):
    max_tokens = 50


def _leaf(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if turns(transcript) < 2:
        return {"type": "tool", "name": "work", "args": {"n": turns(transcript)}, "usage": 100}
    return {"type": "final", "content": "leaf done", "usage": 100}


def _root(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if turns(transcript) == 0:
        calls = [{"name": "leaf", "args": {"task": task}} for task in ("a", "b")]
        return {"type": "tool", "calls": calls, "usage": 100}
    return {"type": "final", "content": "root done", "usage": 100}


leaf = Agent(Model(_leaf), {"work": lambda n: f"worked {n}"}, name="leaf", max_steps=10)
root = Agent(Model(_root), {"leaf": leaf.as_tool("leaf")}, name="root", max_steps=50)
