"""A model that raises: retries with backoff, then `model_error`."""

from __future__ import annotations

import math
from typing import Any

from runner import run_agent
from runner.core.clock import ManualClock
from tests.unit.scripted_models import TOOLS, Failing, Transcript, pairs


def test_a_model_that_keeps_failing_stops_with_model_error() -> None:
    model = Failing(math.inf)
    r = run_agent(model, TOOLS, "t", model_retries=2, retry_backoff=0)
    assert (r.stop_reason, r.output, r.steps) == ("model_error", None, 0)
    assert r.error == "RuntimeError: model is down"
    assert model.calls == 3
    assert r.transcript == [{"role": "user", "content": "t"}]


def test_model_retries_zero_means_one_call() -> None:
    model = Failing(math.inf)
    r = run_agent(model, TOOLS, "t", model_retries=0, retry_backoff=0)
    assert (r.stop_reason, model.calls) == ("model_error", 1)


def test_a_model_that_fails_once_then_answers_is_fine() -> None:
    model = Failing(1)
    r = run_agent(model, TOOLS, "t", retry_backoff=0)
    assert (r.stop_reason, r.output, r.steps, r.error) == ("final", "recovered", 1, None)
    assert model.calls == 2


def test_a_model_that_fails_exactly_model_retries_times_recovers() -> None:
    model = Failing(3)
    r = run_agent(model, TOOLS, "t", model_retries=3, retry_backoff=0)
    assert (r.stop_reason, model.calls) == ("final", 4)
    model = Failing(4)
    r = run_agent(model, TOOLS, "t", model_retries=3, retry_backoff=0)
    assert (r.stop_reason, model.calls) == ("model_error", 4)


def test_model_error_keeps_the_transcript_so_far() -> None:
    calls = 0

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "tool", "name": "search", "args": {"q": 1}, "usage": 5}
        raise ValueError("bad gateway")

    r = run_agent(model, TOOLS, "t", retry_backoff=0)
    assert (r.stop_reason, r.steps, r.tokens) == ("model_error", 1, 5)
    assert r.error == "ValueError: bad gateway"
    assert pairs(r.transcript) == 1


def test_retries_back_off_exponentially() -> None:
    model = Failing(math.inf)
    r = run_agent(model, TOOLS, "t", model_retries=2, retry_backoff=0.05)
    assert r.stop_reason == "model_error"
    first, second = (b - a for a, b in zip(model.times, model.times[1:], strict=False))
    assert first >= 0.05
    assert second >= 0.1


def test_retries_wait_the_doubling_backoff_on_the_runs_clock() -> None:
    clock = ManualClock()
    model = Failing(math.inf)
    r = run_agent(model, TOOLS, "t", model_retries=3, retry_backoff=0.5, clock=clock)
    assert (r.stop_reason, model.calls) == ("model_error", 4)
    assert clock.slept == [0.5, 1.0, 2.0]


def test_a_backoff_longer_than_the_time_left_is_not_slept() -> None:
    clock = ManualClock()
    model = Failing(math.inf)
    r = run_agent(model, TOOLS, "t", max_seconds=0.2, retry_backoff=30, clock=clock)
    assert (r.stop_reason, model.calls, clock.slept) == ("time_budget", 1, [])


def test_a_model_raising_timeout_error_is_retried_not_a_time_budget() -> None:
    # socket.timeout is TimeoutError: the model's own timeout is a model error to retry,
    # not the run's deadline, even when the run has one.
    model = Failing(1, TimeoutError("read timed out"))
    r = run_agent(model, TOOLS, "t", max_seconds=30, retry_backoff=0)
    assert (r.stop_reason, r.output, model.calls) == ("final", "recovered", 2)
    model = Failing(math.inf, TimeoutError("read timed out"))
    r = run_agent(model, TOOLS, "t", max_seconds=30, retry_backoff=0)
    assert (r.stop_reason, r.error) == ("model_error", "TimeoutError: read timed out")


def test_backoff_never_sleeps_past_the_deadline() -> None:
    model = Failing(math.inf)
    clock = ManualClock()
    r = run_agent(model, TOOLS, "t", max_seconds=0.2, retry_backoff=30, clock=clock)
    assert r.stop_reason == "time_budget"
    assert clock.slept == []  # a 30 s backoff past a 0.2 s deadline: not slept at all
    assert model.calls == 1
