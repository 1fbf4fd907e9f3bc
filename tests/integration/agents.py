"""Agents that a run names by reference (`path/to/agents.py:attr`): kept self-contained,
because the loader imports this file by its path, outside any package."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from runner import Agent, tool

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
# The solver, its two model calls drawing from the provider limit `m`.
limited_solver_agent = Agent(solver, {"add": add}, name="solver", release="r1", limit="m")


class Gate:
    """A model that holds each call until the test opens it, so a test can keep a run in
    flight, in its model call, for exactly as long as it needs: no sleeping.

    A call is named by the run's task and the step it decides (1: add 2 and 3, 2: answer).
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._entered: set[tuple[str, int]] = set()
        self._opened: set[tuple[str, int]] = set()
        self._all_open = False

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        call = (str(transcript[0]["content"]), len(seen) + 1)
        with self._changed:
            self._entered.add(call)
            self._changed.notify_all()
            if not self._changed.wait_for(lambda: self._all_open or call in self._opened, 30):
                raise RuntimeError(f"the test never opened the model call {call}")
        if not seen:
            return {"type": "tool", "name": "add", "args": {"a": 2, "b": 3}}
        return {"type": "final", "content": seen[-1]["content"]}

    def entered(self, task: str, step: int) -> bool:
        """Wait until the run with `task` is in its model call for `step`."""
        with self._changed:
            return self._changed.wait_for(lambda: (task, step) in self._entered, 30)

    def open(self, task: str, *steps: int) -> None:
        with self._changed:
            self._opened.update((task, step) for step in steps)
            self._changed.notify_all()

    def reset(self) -> None:
        with self._changed:
            self._entered.clear()
            self._opened.clear()
            self._all_open = False

    def open_all(self) -> None:
        with self._changed:
            self._all_open = True
            self._changed.notify_all()


gated_agent = Agent(Gate(), {"add": add}, name="gated")

GATED_REF = f"{Path(__file__).resolve()}:gated_agent"


class Rendezvous:
    """A model whose first call in each run waits until `expected` runs are all in their
    model call at once: a run can only finish once that many were in flight together.

    Each run then makes two calls of `add` and answers; `peak` is the most calls in flight
    at one moment.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.expected = 0
        self.inside = 0
        self.peak = 0
        self._met = False

    def reset(self, expected: int) -> None:
        with self._changed:
            self.expected, self.inside, self.peak, self._met = expected, 0, 0, False

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        with self._changed:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            if self.inside >= self.expected:
                self._met = True
                self._changed.notify_all()
            met = self._changed.wait_for(lambda: self._met, 60) if not seen else True
            self.inside -= 1
        if not met:
            raise RuntimeError(f"only {self.peak} of {self.expected} runs were ever in flight")
        if len(seen) < 2:
            return {"type": "tool", "name": "add", "args": {"a": len(seen), "b": 1}}
        return {"type": "final", "content": seen[-1]["content"]}


rendezvous_agent = Agent(Rendezvous(), {"add": add}, name="rendezvous")

RENDEZVOUS_REF = f"{Path(__file__).resolve()}:rendezvous_agent"


@tool(approval=True)
def refund(amount: int) -> str:
    return f"refunded {amount}"


def shopper(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Asks for one refund (a call that waits for a person's approval), then ends with it."""
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "refund", "args": {"amount": 5}}
    return {"type": "final", "content": seen[-1]["content"]}


shop = Agent(shopper, {"refund": refund}, ref=f"{Path(__file__).resolve()}:shop")
