"""Agents the operating tests name by reference (`path/to/operating_agents.py:attr`): a
counter, and versions of it whose code changed in the ways a replay must notice.

Kept self-contained: the loader imports this file by its path, outside any package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner import Agent, current_call, tool

MODEL_CALLS: list[int] = []  # the step each model call decided, across every run
TOOL_CALLS: list[str] = []  # the idempotency key of each call of `add`

HERE = Path(__file__).resolve()


def ref(name: str) -> str:
    return f"{HERE}:{name}"


def count_to_three(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """add(n, 1) with the last result until it reaches 3, then answer it."""
    seen = [m for m in transcript if m["role"] == "tool"]
    MODEL_CALLS.append(len([m for m in transcript if m["role"] == "assistant"]) + 1)
    last = int(seen[-1]["content"]) if seen and not seen[-1]["is_error"] else 0
    if last >= 3:
        return {"type": "final", "content": str(last), "usage": {"tokens": 10, "cost": 0.25}}
    return {"type": "tool", "name": "add", "args": {"a": last, "b": 1}, "usage": 10}


@tool(idempotent=True)
def add(a: int, b: int) -> int:
    call = current_call()
    TOOL_CALLS.append(call.idempotency_key if call else "?")
    return a + b


@tool(idempotent=True)
def add_renamed_arguments(x: int, y: int) -> int:
    return x + y


def broken_context(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(transcript) > 2:
        raise KeyError("summary")
    return transcript


counter = Agent(count_to_three, {"add": add}, name="counter", release="1")
# The same agent after three kinds of change a replay must notice.
without_add = Agent(count_to_three, {"plus": add}, name="counter", release="2")
new_signature = Agent(count_to_three, {"add": add_renamed_arguments}, name="counter", release="3")
new_context = Agent(
    count_to_three, {"add": add}, name="counter", release="4", context=broken_context
)
# And after one it must not: a release label changes no step.
relabelled = Agent(count_to_three, {"add": add}, name="counter", release="5")
