"""A run whose loop runs on a thread of its own (runner.core.loop_host) wakes the thread
that waits for it only when it must: at the run's end, or by a call's deadline. A call that
answers in time wakes nobody, the first one included: each wake-up makes the loop's thread
hand the GIL over and take it back, across processors on a quiet machine."""

from __future__ import annotations

from typing import Any

import pytest

from runner import run_agent
from runner.core import calls


def test_calls_that_answer_in_time_never_wake_the_waiting_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not calls._EVENTFD:
        pytest.skip("no eventfd on this system: a caller's signal is made for one call")
    mine = calls._callers_signal()  # the signal this thread waits on for the run
    sets: list[object] = []
    kind = type(mine)
    real_set = kind.set

    def counted(signal: Any) -> None:
        if signal is mine:
            sets.append(signal)
        real_set(signal)

    monkeypatch.setattr(kind, "set", counted)

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if len(transcript) < 41:
            return {"type": "tool", "name": "echo", "args": {"i": len(transcript)}}
        return {"type": "final", "content": "done"}

    for _ in range(3):
        sets.clear()
        result = run_agent(model, {"echo": lambda i: i}, "go", max_steps=50, max_repeats=None)
        assert (result.stop_reason, result.steps) == ("final", 21)
        assert len(sets) == 1  # the run's end, and nothing before it
