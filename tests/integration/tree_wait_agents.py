"""A lead whose sub-agent's one tool needs a person's approval: the tree waits for a person
below its root (tests/integration/test_tree_follow.py)."""

from __future__ import annotations

from typing import Any

from runner import Agent, tool


@tool(approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _clerk(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if not any(m["role"] == "tool" for m in transcript):
        return {"type": "tool", "name": "pay", "args": {"amount": 5}}
    return {"type": "final", "content": "done"}


clerk = Agent(_clerk, {"pay": pay}, name="clerk")


def _lead(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if not any(m["role"] == "tool" for m in transcript):
        return {"type": "tool", "name": "clerk", "args": {"task": "pay 5"}}
    return {"type": "final", "content": "ok"}


lead = Agent(_lead, {"clerk": clerk.as_tool("clerk")}, name="lead")
