"""An agent for the provider-limit acceptance tests: one model call that reports 50 tokens,
drawing from the limit `m` (self-contained: a worker loads this file by its path)."""

from __future__ import annotations

from runner import Agent
from runner.testing import FunctionModel


def answer(transcript: list[dict[str, object]]) -> dict[str, object]:
    return {"type": "final", "content": "done", "usage": 50}


agent = Agent(FunctionModel(answer), limit="m")
