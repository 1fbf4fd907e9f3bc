"""Models and tools the budget tests share."""

from __future__ import annotations

import time
from typing import Any

Transcript = list[dict[str, Any]]


class Model:
    """A model that calls `search` with a fresh argument each step; counts its calls."""

    def __init__(self, usage: Any = None, final_after: int | None = None) -> None:
        self.usage = usage
        self.final_after = final_after
        self.calls = 0

    def __call__(self, tr: Transcript) -> dict[str, Any]:
        self.calls += 1
        out: dict[str, Any]
        if self.final_after is not None and self.calls > self.final_after:
            out = {"type": "final", "content": "answer"}
        else:
            out = {"type": "tool", "name": "search", "args": {"q": self.calls}}
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def search(q: object) -> str:
    return f"results for {q}"


TOOLS = {"search": search}


def pairs(tr: Transcript) -> int:
    return sum(1 for m in tr if m["role"] == "tool")


class Failing:
    """A model that raises its first `failures` calls, then answers."""

    def __init__(self, failures: float, exc: Exception | None = None) -> None:
        self.failures = failures
        self.exc = exc or RuntimeError("model is down")
        self.calls = 0
        self.times: list[float] = []

    def __call__(self, tr: Transcript) -> dict[str, Any]:
        self.calls += 1
        self.times.append(time.monotonic())
        if self.calls <= self.failures:
            raise self.exc
        return {"type": "final", "content": "recovered"}
