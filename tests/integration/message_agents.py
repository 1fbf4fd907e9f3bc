"""Agents that messages are sent to, named by reference (`path/to/message_agents.py:attr`):
kept self-contained, because the loader imports this file by its path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runner import Agent


class Order(BaseModel):
    item: str
    quantity: int


def echo(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Answers with every user turn after the task."""
    said = [m["content"] for m in transcript[1:] if m["role"] == "user"]
    return {"type": "final", "content": " | ".join(said) or "nothing said"}


typed = Agent(echo, name="orders", accepts=Order)
text = Agent(echo, name="echo")

TYPED_REF = f"{Path(__file__).resolve()}:typed"
TEXT_REF = f"{Path(__file__).resolve()}:text"
