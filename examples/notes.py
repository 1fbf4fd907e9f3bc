"""An example agent that takes messages while it runs: a scripted "model" keeping notes.

It needs no network and no API key. It writes the task down (one tool call), then answers
with the task and every message sent to the run since (`runner send`), in order:

    runner submit examples/notes.py:agent "Plan the team offsite" --id notes-1
    runner send notes-1 "The budget is 2000 EUR"
    runner worker --once
"""

from __future__ import annotations

from typing import Any

from runner import Agent, tool


@tool(idempotent=True)
def write_down(text: str) -> str:
    return f"noted: {text}"


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if not any(message["role"] == "tool" for message in transcript):
        return {"type": "tool", "name": "write_down", "args": {"text": transcript[0]["content"]}}
    told = [m["content"] for m in transcript[1:] if m["role"] == "user"]
    return {"type": "final", "content": "; ".join([transcript[0]["content"], *told])}


agent = Agent(model, {"write_down": write_down}, name="notes", release="1")
