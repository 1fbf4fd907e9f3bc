"""A real model doing the calculator's job, on any OpenAI-compatible endpoint.

The endpoint comes from the environment, as the `openai` SDK reads it:

    export OPENAI_API_KEY=sk-...                 # OpenAI; RUNNER_MODEL defaults to gpt-4.1-mini
    export OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_API_KEY=ollama RUNNER_MODEL=llama3.2
    runner run examples/openai_agent.py:agent "What is (2 + 3) * 7?"

The model is sent the tools' schemas (built from their signatures and docstrings), and
every step is journaled: kill the run and `runner resume` it like any other.
"""

from __future__ import annotations

import os

from runner import Agent, tool
from runner.core.context import compose, cut_observations, last_steps
from runner.models import OpenAIChat

SYSTEM = (
    "You are a careful calculator. Do every operation with a tool, one call at a time. "
    "When you have the result, reply with the number alone."
)


@tool(idempotent=True)
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool(idempotent=True)
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


agent = Agent(
    # No key or URL here: the SDK reads OPENAI_API_KEY and OPENAI_BASE_URL when the run
    # makes its first call, so importing this file (say, to `runner show` a run) needs none.
    OpenAIChat(os.environ.get("RUNNER_MODEL", "gpt-4.1-mini"), system=SYSTEM),
    {"add": add, "multiply": multiply},
    name="openai-calculator",
    release="1.0",
    # The model sees the task and its last 12 steps, observations cut at 4000 characters;
    # the journal keeps everything.
    context=compose(last_steps(12), cut_observations(4000)),
    max_steps=8,
)
