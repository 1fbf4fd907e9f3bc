"""The wall-clock budget: deadlines before model calls, slow models and tools cut off."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from runner import run_agent
from runner.core.clock import ManualClock
from tests.unit.scripted_models import TOOLS, Model, Transcript, pairs


def test_zero_seconds_stops_before_the_model_is_asked() -> None:
    model = Model(final_after=0)
    r = run_agent(model, TOOLS, "t", max_seconds=0)
    assert (r.stop_reason, r.output, r.steps) == ("time_budget", None, 0)
    assert r.transcript == [{"role": "user", "content": "t"}]
    assert model.calls == 0


def test_the_deadline_is_checked_before_each_model_call() -> None:
    clock = ManualClock()

    def slow_search(q: object) -> str:
        clock.advance(10)  # each tool call takes ten seconds of the budget
        return "r"

    model = Model()
    r = run_agent(model, {"search": slow_search}, "t", max_seconds=25, max_steps=8, clock=clock)
    # 0s: step 1 -> 10s: step 2 -> 20s: step 3 -> 30s: over, stop before asking again.
    assert (r.stop_reason, r.steps) == ("time_budget", 3)
    assert model.calls == 3
    assert pairs(r.transcript) == 3
    assert r.output is None


def test_the_deadline_exactly_reached_is_over() -> None:
    clock = ManualClock()

    def tick(q: object) -> str:
        clock.advance(5)
        return "r"

    r = run_agent(Model(), {"search": tick}, "t", max_seconds=10, clock=clock)
    assert (r.stop_reason, r.steps) == ("time_budget", 2)


def test_a_slow_model_is_cut_off_at_the_deadline(release: threading.Event) -> None:
    calls = 0
    answered = threading.Event()

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "tool", "name": "search", "args": {"q": 1}}
        release.wait(600)  # until the test ends
        answered.set()
        return {"type": "final", "content": "too late"}

    started = time.monotonic()
    r = run_agent(model, TOOLS, "t", max_seconds=0.3)
    elapsed = time.monotonic() - started
    assert (r.stop_reason, r.output, r.steps) == ("time_budget", None, 1)
    assert not answered.is_set()  # the run was given back while the model still thought
    assert elapsed >= 0.25
    assert pairs(r.transcript) == 1
    assert r.transcript[-1]["role"] == "tool"


def test_a_slow_tool_cannot_run_past_the_deadline(release: threading.Event) -> None:
    def stuck(q: object) -> str:
        release.wait(10)
        return "finally"

    model = Model(final_after=5)
    r = run_agent(model, {"search": stuck}, "t", max_seconds=0.3)
    assert (r.stop_reason, r.steps) == ("time_budget", 1)
    observation = r.transcript[-1]
    assert observation["role"] == "tool" and observation["is_error"] is True
    assert observation["content"].startswith("TimeoutError: ")
    assert model.calls == 1


def test_an_async_slow_tool_is_cancelled_at_the_deadline() -> None:
    cancelled = threading.Event()

    async def stuck(q: object) -> str:
        import asyncio

        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    r = run_agent(Model(), {"search": stuck}, "t", max_seconds=0.3)
    assert (r.stop_reason, r.steps) == ("time_budget", 1)
    assert r.transcript[-1]["content"].startswith("TimeoutError: ")
    assert cancelled.wait(60)


def test_an_infinite_time_budget_is_no_limit() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        time.sleep(0.01)  # long enough that the wait for it really waits
        if len(tr) == 1:
            return {"type": "tool", "name": "search", "args": {"q": 1}}
        return {"type": "final", "content": "ok"}

    for seconds in (math.inf, 1e12):
        r = run_agent(model, TOOLS, "t", max_seconds=seconds, retry_backoff=0)
        assert (r.stop_reason, r.output, r.error) == ("final", "ok", None)
