"""The bundled example agent: a scripted "model" that does arithmetic with tools.

It needs no network and no API key. A real agent replaces `model` with a call to an LLM;
everything else stays the same. Run it with:

    runner run examples/calculator.py:agent "What is (2 + 3) * 7?"

Set CALCULATOR_PAUSE=2 to make each tool call take two seconds (time to kill and resume).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from runner import Agent, tool

PAUSE = float(os.environ.get("CALCULATOR_PAUSE", "0"))


@tool(idempotent=True)
def add(a: float, b: float) -> float:
    time.sleep(PAUSE)
    return a + b


@tool(idempotent=True)
def multiply(a: float, b: float) -> float:
    time.sleep(PAUSE)
    return a * b


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Plan `(x + y) * z` from the task, one tool call per step, then answer."""
    numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", transcript[0]["content"])]
    results = [m["content"] for m in transcript if m["role"] == "tool" and not m["is_error"]]
    usage = {"tokens": 40 + 10 * len(transcript), "cost": 0.0001}
    if len(numbers) < 3:
        return {"type": "final", "content": "I can only do (x + y) * z.", "usage": usage}
    x, y, z = numbers[:3]
    if not results:
        return {"type": "tool", "name": "add", "args": {"a": x, "b": y}, "usage": usage}
    if len(results) == 1:
        return {
            "type": "tool",
            "name": "multiply",
            "args": {"a": float(results[0]), "b": z},
            "usage": usage,
        }
    answer = float(results[-1])
    text = str(int(answer)) if answer.is_integer() else str(answer)
    return {"type": "final", "content": text, "usage": usage}


agent = Agent(model, {"add": add, "multiply": multiply}, name="calculator", release="1.0")
