"""The budgets beyond seed 000: time, cost, cancellation, model errors, tool timeouts, wrap-up."""

from __future__ import annotations

import importlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runner import Budgets, StopReason, run_agent, tool

Transcript = list[dict[str, Any]]

loop_module = importlib.import_module("runner.loop")
run_module = importlib.import_module("runner.run")


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set when the test ends, so that calls the runner abandoned finish promptly."""
    event = threading.Event()
    yield event
    event.set()


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


# -- time -----------------------------------------------------------------------------------


def test_zero_seconds_stops_before_the_model_is_asked() -> None:
    model = Model(final_after=0)
    r = run_agent(model, TOOLS, "t", max_seconds=0)
    assert (r.stop_reason, r.output, r.steps) == ("time_budget", None, 0)
    assert r.transcript == [{"role": "user", "content": "t"}]
    assert model.calls == 0


class Clock:
    """A stand-in for the `time` module whose clock moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_deadline_is_checked_before_each_model_call(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    monkeypatch.setattr(run_module, "time", clock)

    def slow_search(q: object) -> str:
        clock.now += 10  # each tool call takes ten seconds of the budget
        return "r"

    model = Model()
    r = run_agent(model, {"search": slow_search}, "t", max_seconds=25, max_steps=8)
    # 0s: step 1 -> 10s: step 2 -> 20s: step 3 -> 30s: over, stop before asking again.
    assert (r.stop_reason, r.steps) == ("time_budget", 3)
    assert model.calls == 3
    assert pairs(r.transcript) == 3
    assert r.output is None


def test_the_deadline_exactly_reached_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(loop_module, "time", clock)
    monkeypatch.setattr(run_module, "time", clock)

    def tick(q: object) -> str:
        clock.now += 5
        return "r"

    r = run_agent(Model(), {"search": tick}, "t", max_seconds=10)
    assert (r.stop_reason, r.steps) == ("time_budget", 2)


def test_a_slow_model_is_cut_off_at_the_deadline(release: threading.Event) -> None:
    calls = 0

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "tool", "name": "search", "args": {"q": 1}}
        release.wait(10)
        return {"type": "final", "content": "too late"}

    started = time.monotonic()
    r = run_agent(model, TOOLS, "t", max_seconds=0.3)
    elapsed = time.monotonic() - started
    assert (r.stop_reason, r.output, r.steps) == ("time_budget", None, 1)
    assert 0.25 <= elapsed < 3
    assert pairs(r.transcript) == 1
    assert r.transcript[-1]["role"] == "tool"


def test_a_slow_tool_cannot_run_past_the_deadline(release: threading.Event) -> None:
    def stuck(q: object) -> str:
        release.wait(10)
        return "finally"

    model = Model(final_after=5)
    started = time.monotonic()
    r = run_agent(model, {"search": stuck}, "t", max_seconds=0.3)
    elapsed = time.monotonic() - started
    assert (r.stop_reason, r.steps) == ("time_budget", 1)
    assert elapsed < 3
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
    assert cancelled.wait(2)


def test_an_infinite_time_budget_is_no_limit() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        time.sleep(0.01)  # long enough that the wait for it really waits
        if len(tr) == 1:
            return {"type": "tool", "name": "search", "args": {"q": 1}}
        return {"type": "final", "content": "ok"}

    for seconds in (math.inf, 1e12):
        r = run_agent(model, TOOLS, "t", max_seconds=seconds, retry_backoff=0)
        assert (r.stop_reason, r.output, r.error) == ("final", "ok", None)


# -- cost -----------------------------------------------------------------------------------


def test_cost_budget_stops_one_over() -> None:
    model = Model(usage={"tokens": 10, "cost": 0.4})
    r = run_agent(model, TOOLS, "t", max_cost=1.0)
    assert (r.stop_reason, r.output, r.steps) == ("cost_budget", None, 3)
    assert r.cost == pytest.approx(1.2)
    assert r.tokens == 30
    assert pairs(r.transcript) == 2  # the third action broke the budget and is not shown


def test_cost_exactly_at_the_budget_continues() -> None:
    r = run_agent(Model(usage={"cost": 0.25}), TOOLS, "t", max_steps=4, max_cost=1.0)
    assert (r.stop_reason, r.steps, r.cost) == ("max_steps", 4, 1.0)
    r = run_agent(Model(usage={"cost": 0.25}), TOOLS, "t", max_steps=5, max_cost=1.0)
    assert (r.stop_reason, r.steps, r.cost) == ("cost_budget", 5, 1.25)


def test_zero_cost_budget() -> None:
    r = run_agent(Model(usage={"cost": 0}, final_after=1), TOOLS, "t", max_cost=0)
    assert r.stop_reason == "final"
    r = run_agent(Model(usage={"cost": 0.01}, final_after=1), TOOLS, "t", max_cost=0)
    assert (r.stop_reason, r.steps) == ("cost_budget", 1)


def test_cost_without_max_cost_is_only_counted() -> None:
    r = run_agent(Model(usage={"cost": 5.0}), TOOLS, "t", max_steps=3)
    assert (r.stop_reason, r.cost) == ("max_steps", 15.0)


def test_tokens_are_checked_before_cost() -> None:
    model = Model(usage={"tokens": 11, "cost": 2.0})
    r = run_agent(model, TOOLS, "t", max_tokens=10, max_cost=1.0)
    assert (r.stop_reason, r.steps) == ("token_budget", 1)


def test_usage_mapping_tokens_count_against_max_tokens() -> None:
    r = run_agent(Model(usage={"tokens": 4000}), TOOLS, "t")
    assert (r.stop_reason, r.steps, r.tokens) == ("token_budget", 3, 12_000)


def test_input_and_output_tokens_are_added() -> None:
    usage = {"input_tokens": 3000, "output_tokens": 2000}
    r = run_agent(Model(usage=usage), TOOLS, "t")
    assert (r.stop_reason, r.steps, r.tokens) == ("token_budget", 3, 15_000)
    r = run_agent(Model(usage={"input_tokens": 7}), TOOLS, "t", max_steps=2)
    assert r.tokens == 14
    r = run_agent(Model(usage={"output_tokens": 7}), TOOLS, "t", max_steps=2)
    assert r.tokens == 14


def test_a_tokens_key_wins_over_input_and_output_tokens() -> None:
    usage = {"tokens": 1, "input_tokens": 100, "output_tokens": 100}
    r = run_agent(Model(usage=usage), TOOLS, "t", max_steps=2)
    assert r.tokens == 2


# -- cancellation ---------------------------------------------------------------------------


def test_cancel_callable_stops_before_the_next_step() -> None:
    cancelled = False

    def search_then_cancel(q: object) -> str:
        nonlocal cancelled
        if q == 2:
            cancelled = True
        return "r"

    model = Model()
    r = run_agent(model, {"search": search_then_cancel}, "t", cancel=lambda: cancelled)
    assert (r.stop_reason, r.output, r.steps) == ("cancelled", None, 2)
    assert model.calls == 2
    assert pairs(r.transcript) == 2
    assert r.transcript[-1]["content"] == "r"


def test_cancel_event_stops_before_the_next_step() -> None:
    event = threading.Event()

    def search_then_cancel(q: object) -> str:
        event.set()
        return "r"

    model = Model()
    r = run_agent(model, {"search": search_then_cancel}, "t", cancel=event)
    assert (r.stop_reason, r.steps) == ("cancelled", 1)
    assert model.calls == 1
    assert [m["role"] for m in r.transcript] == ["user", "assistant", "tool"]


def test_cancelled_before_the_start_takes_no_steps() -> None:
    event = threading.Event()
    event.set()
    model = Model(final_after=0)
    r = run_agent(model, TOOLS, "t", cancel=event)
    assert (r.stop_reason, r.steps, model.calls) == ("cancelled", 0, 0)
    assert r.transcript == [{"role": "user", "content": "t"}]


def test_an_unset_cancel_changes_nothing() -> None:
    r = run_agent(Model(final_after=1), TOOLS, "t", cancel=threading.Event())
    assert (r.stop_reason, r.steps) == ("final", 2)
    r = run_agent(Model(final_after=1), TOOLS, "t", cancel=lambda: False)
    assert (r.stop_reason, r.steps) == ("final", 2)


def test_cancel_keeps_tokens_and_cost_spent() -> None:
    event = threading.Event()

    def search_then_cancel(q: object) -> str:
        event.set()
        return "r"

    r = run_agent(
        Model(usage={"tokens": 7, "cost": 0.5}), {"search": search_then_cancel}, "t", cancel=event
    )
    assert (r.stop_reason, r.tokens, r.cost) == ("cancelled", 7, 0.5)


# -- model errors ---------------------------------------------------------------------------


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
    started = time.monotonic()
    r = run_agent(model, TOOLS, "t", max_seconds=0.2, retry_backoff=30)
    assert r.stop_reason == "time_budget"
    assert time.monotonic() - started < 3
    assert model.calls == 1


# -- tool timeouts --------------------------------------------------------------------------


def test_a_tool_timeout_is_an_error_observation(release: threading.Event) -> None:
    @tool(timeout=0.1)
    def slow(q: object) -> str:
        release.wait(10)
        return "late"

    r = run_agent(Model(final_after=1), {"search": slow}, "t")
    assert r.stop_reason == "final"
    assert r.transcript[2] == {
        "role": "tool",
        "name": "search",
        "content": "TimeoutError: search took longer than 0.1s",
        "is_error": True,
    }


def test_run_wide_tool_timeout(release: threading.Event) -> None:
    def slow(q: object) -> str:
        release.wait(10)
        return "late"

    started = time.monotonic()
    r = run_agent(Model(), {"search": slow}, "t", tool_timeout=0.05)
    # Three timeouts in a row: more than max_consecutive_errors=2.
    assert (r.stop_reason, r.steps) == ("tool_errors", 3)
    assert all(m["is_error"] for m in r.transcript if m["role"] == "tool")
    assert "took longer than 0.05s" in r.transcript[-1]["content"]
    assert time.monotonic() - started < 3


def test_tool_timeouts_count_toward_the_error_streak(release: threading.Event) -> None:
    @tool(timeout=0.05)
    def slow(q: object) -> str:
        release.wait(10)
        return "late"

    r = run_agent(Model(), {"search": slow}, "t", max_consecutive_errors=0)
    assert (r.stop_reason, r.steps) == ("tool_errors", 1)


def test_a_tools_own_timeout_wins_over_the_run_wide_one() -> None:
    @tool(timeout=5)
    def patient(q: object) -> str:
        time.sleep(0.15)
        return "done"

    r = run_agent(Model(final_after=1), {"search": patient}, "t", tool_timeout=0.05)
    assert r.transcript[2]["content"] == "done"
    assert r.transcript[2]["is_error"] is False


def test_a_fast_tool_under_a_timeout_returns_normally() -> None:
    r = run_agent(Model(final_after=1), TOOLS, "t", tool_timeout=5)
    assert r.transcript[2] == {
        "role": "tool",
        "name": "search",
        "content": "results for 1",
        "is_error": False,
    }


def test_a_tools_own_timeout_error_keeps_its_message() -> None:
    def flaky(q: object) -> str:
        raise TimeoutError("upstream did not answer")

    r = run_agent(Model(final_after=1), {"search": flaky}, "t", tool_timeout=5)
    assert r.transcript[2]["content"] == "TimeoutError: upstream did not answer"
    r = run_agent(Model(final_after=1), {"search": flaky}, "t", max_seconds=30)
    assert r.transcript[2]["content"] == "TimeoutError: upstream did not answer"


def test_an_async_tools_own_timeout_error_keeps_its_message() -> None:
    async def flaky(q: object) -> str:
        raise TimeoutError("upstream did not answer")

    r = run_agent(Model(final_after=1), {"search": flaky}, "t", tool_timeout=5)
    assert r.transcript[2]["content"] == "TimeoutError: upstream did not answer"


def test_a_huge_tool_timeout_is_no_limit() -> None:
    def sleepy(q: object) -> str:
        time.sleep(0.01)
        return "ok"

    for limit in (math.inf, 1e12):
        r = run_agent(Model(final_after=1), {"search": sleepy}, "t", tool_timeout=limit)
        assert r.transcript[2]["content"] == "ok"
        r = run_agent(Model(final_after=1), {"search": tool(timeout=limit)(sleepy)}, "t")
        assert r.transcript[2]["content"] == "ok"


# -- wrap-up --------------------------------------------------------------------------------


class WrapsUp:
    """Calls tools until the runner says the budget is spent, then answers."""

    def __init__(self, usage: Any = None, answer: Any = None) -> None:
        self.usage = usage
        self.answer = answer if answer is not None else {"type": "final", "content": "best"}
        self.calls = 0
        self.saw: Transcript = []

    def __call__(self, tr: Transcript) -> dict[str, Any]:
        self.calls += 1
        if tr[-1]["role"] == "user" and len(tr) > 1:
            self.saw = [dict(m) for m in tr]
            return dict(self.answer)
        out: dict[str, Any] = {"type": "tool", "name": "search", "args": {"q": self.calls}}
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def check_wrapped(r: Any, model: WrapsUp, reason: str) -> None:
    assert r.stop_reason == reason
    assert r.output == "best"
    assert r.wrapped_up is True
    note, final = r.transcript[-2:]
    assert note["role"] == "user" and set(note) == {"role", "content"}
    assert reason in note["content"]
    assert final == {"role": "assistant", "content": "best"}
    assert model.saw[-1] == note


def test_wrap_up_after_max_steps() -> None:
    model = WrapsUp()
    r = run_agent(model, TOOLS, "t", max_steps=2, wrap_up=True)
    check_wrapped(r, model, "max_steps")
    assert r.steps == 2
    assert model.calls == 3


def test_wrap_up_after_token_budget() -> None:
    model = WrapsUp(usage=6)
    r = run_agent(model, TOOLS, "t", max_tokens=10, wrap_up=True)
    check_wrapped(r, model, "token_budget")
    assert r.steps == 2
    assert model.calls == 3
    # The action that broke the budget never ran and is not shown.
    assert pairs(r.transcript) == 1


def test_wrap_up_after_cost_budget() -> None:
    model = WrapsUp(usage={"cost": 0.6})
    r = run_agent(model, TOOLS, "t", max_cost=1.0, wrap_up=True)
    check_wrapped(r, model, "cost_budget")
    assert r.steps == 2


def test_wrap_up_after_time_budget(release: threading.Event) -> None:
    def stuck(q: object) -> str:
        release.wait(10)
        return "late"

    model = WrapsUp()
    r = run_agent(model, {"search": stuck}, "t", max_seconds=0.2, wrap_up=True)
    check_wrapped(r, model, "time_budget")
    assert r.steps == 1


def test_a_zero_step_cap_makes_no_call_even_with_wrap_up() -> None:
    # Zero means zero: the cap is not "about to stop" a run that never started.
    model = WrapsUp()
    r = run_agent(model, TOOLS, "t", max_steps=0, wrap_up=True)
    assert (r.stop_reason, r.output, r.steps, r.wrapped_up) == ("max_steps", None, 0, False)
    assert model.calls == 0
    assert r.transcript == [{"role": "user", "content": "t"}]


@pytest.mark.parametrize(
    ("kwargs", "usage", "reason"),
    [
        ({"max_steps": 2}, None, "max_steps"),
        ({"max_tokens": 10}, 6, "token_budget"),
        ({"max_cost": 1.0}, {"cost": 0.6}, "cost_budget"),
    ],
)
def test_without_wrap_up_there_is_no_last_call(
    kwargs: dict[str, Any], usage: Any, reason: str
) -> None:
    model = WrapsUp(usage=usage)
    r = run_agent(model, TOOLS, "t", **kwargs)
    assert (r.stop_reason, r.output, r.wrapped_up) == (reason, None, False)
    assert model.calls == r.steps
    assert all(m["role"] != "user" for m in r.transcript[1:])


def test_a_wrap_up_answer_that_is_not_final_leaves_no_output() -> None:
    ran: list[object] = []

    def search_logged(q: object) -> str:
        ran.append(q)
        return "r"

    model = WrapsUp(answer={"type": "tool", "name": "search", "args": {"q": "more"}})
    r = run_agent(model, {"search": search_logged}, "t", max_steps=2, wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, r.steps) == ("max_steps", None, False, 2)
    assert ran == [1, 2]  # the wrap-up's tool call never runs
    assert r.transcript[-1]["role"] == "user"  # the note, with no answer after it


def test_a_wrap_up_model_that_raises_leaves_no_output() -> None:
    calls = 0

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("gone")
        return {"type": "tool", "name": "search", "args": {"q": 1}}

    r = run_agent(model, TOOLS, "t", max_steps=1, wrap_up=True, retry_backoff=0)
    assert (r.stop_reason, r.output, r.wrapped_up) == ("max_steps", None, False)


def test_wrap_up_tokens_are_counted() -> None:
    model = WrapsUp(usage=6)
    r = run_agent(model, TOOLS, "t", max_steps=1, wrap_up=True)
    assert r.tokens == 6  # the wrap-up answer reported no usage
    model = WrapsUp(usage=6, answer={"type": "final", "content": "best", "usage": 3})
    r = run_agent(model, TOOLS, "t", max_steps=1, wrap_up=True)
    assert (r.tokens, r.output) == (9, "best")


def test_no_wrap_up_after_repeated_call() -> None:
    calls = 0

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if tr[-1]["role"] == "user" and len(tr) > 1:
            return {"type": "final", "content": "wrapped"}
        return {"type": "tool", "name": "search", "args": {"q": "same"}}

    r = run_agent(model, TOOLS, "t", wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, r.steps) == ("repeated_call", None, False, 3)
    assert calls == 3


def test_no_wrap_up_after_tool_errors() -> None:
    model = WrapsUp()
    r = run_agent(model, {"search": lambda q: 1 / 0}, "t", wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, r.steps) == ("tool_errors", None, False, 3)
    assert model.calls == 3


def test_no_wrap_up_after_model_error_or_cancel() -> None:
    model = Failing(math.inf)
    r = run_agent(model, TOOLS, "t", wrap_up=True, retry_backoff=0)
    assert (r.stop_reason, r.wrapped_up, model.calls) == ("model_error", False, 3)
    event = threading.Event()
    event.set()
    wraps = WrapsUp()
    r = run_agent(wraps, TOOLS, "t", wrap_up=True, cancel=event)
    assert (r.stop_reason, r.wrapped_up, wraps.calls) == ("cancelled", False, 0)


def test_a_final_with_wrap_up_on_is_just_a_final() -> None:
    model = Model(final_after=1)
    r = run_agent(model, TOOLS, "t", wrap_up=True)
    assert (r.stop_reason, r.output, r.wrapped_up, model.calls) == ("final", "answer", False, 2)


# -- budget stops never raise ---------------------------------------------------------------

STOPS: list[tuple[str, Callable[[], Any], int]] = [
    ("max_steps", lambda: run_agent(Model(usage=1), TOOLS, "t", max_steps=3), 1),
    ("token_budget", lambda: run_agent(Model(usage=7), TOOLS, "t", max_tokens=20), 7),
    (
        "cost_budget",
        lambda: run_agent(Model(usage={"cost": 1, "tokens": 2}), TOOLS, "t", max_cost=2),
        2,
    ),
    ("time_budget", lambda: run_agent(Model(usage=1), TOOLS, "t", max_seconds=0), 0),
    (
        "repeated_call",
        lambda: run_agent(
            lambda tr: {"type": "tool", "name": "search", "args": {"q": 1}, "usage": 1},
            TOOLS,
            "t",
        ),
        1,
    ),
    ("tool_errors", lambda: run_agent(Model(usage=1), {"search": lambda q: 1 / 0}, "t"), 1),
]


@pytest.mark.parametrize(("reason", "run", "per_step"), STOPS, ids=[s[0] for s in STOPS])
def test_budget_stops_return_what_was_spent(
    reason: str, run: Callable[[], Any], per_step: int
) -> None:
    r = run()  # never raises
    assert r.stop_reason == reason
    assert isinstance(r.stop_reason, StopReason)
    assert r.output is None
    assert r.transcript[0] == {"role": "user", "content": "t"}
    assert r.tokens == per_step * r.steps
    assert r.run_id


# -- invalid budgets ------------------------------------------------------------------------

INVALID = [
    ("max_steps", -1),
    ("max_steps", None),
    ("max_steps", True),
    ("max_steps", 2.0),
    ("max_steps", "8"),
    ("max_tokens", -1),
    ("max_tokens", True),
    ("max_tokens", 1.5),
    ("max_tokens", math.nan),
    ("max_tokens", "10"),
    ("max_consecutive_errors", -1),
    ("max_consecutive_errors", False),
    ("max_consecutive_errors", math.nan),
    ("max_repeats", -2),
    ("max_repeats", True),
    ("max_repeats", "2"),
    ("max_seconds", -0.5),
    ("max_seconds", math.nan),
    ("max_seconds", True),
    ("max_seconds", "1"),
    ("max_cost", -1),
    ("max_cost", math.nan),
    ("max_cost", False),
    ("max_cost", "1"),
    ("model_retries", -1),
    ("model_retries", True),
    ("model_retries", None),
    ("model_retries", 1.0),
    ("retry_backoff", -1),
    ("retry_backoff", math.nan),
    ("retry_backoff", None),
    ("retry_backoff", True),
    ("tool_timeout", 0),
    ("tool_timeout", -1),
    ("tool_timeout", math.nan),
    ("tool_timeout", True),
    ("wrap_up", 1),
    ("wrap_up", "yes"),
    ("wrap_up", None),
]


@pytest.mark.parametrize(("name", "value"), INVALID)
def test_invalid_budgets_raise_before_the_model_is_called(name: str, value: Any) -> None:
    model = Model(final_after=0)
    with pytest.raises(ValueError, match=name):
        run_agent(model, TOOLS, "t", **{name: value})
    assert model.calls == 0
    with pytest.raises(ValueError, match=name):
        Budgets(**{name: value})


def test_a_task_that_is_not_a_string_raises_before_the_model_is_called() -> None:
    model = Model(final_after=0)
    with pytest.raises(ValueError, match="task"):
        run_agent(model, TOOLS, 42)  # type: ignore[arg-type]
    assert model.calls == 0


@pytest.mark.parametrize("value", [0, math.inf])
def test_edge_values_that_are_valid_budgets(value: float) -> None:
    Budgets(max_seconds=value, max_cost=value, retry_backoff=value)
    Budgets(max_tokens=0, max_consecutive_errors=0, max_repeats=0, max_steps=0, model_retries=0)


def test_none_budgets_are_unlimited() -> None:
    r = run_agent(
        Model(usage=10**6), TOOLS, "t", 3, None, None, None, max_seconds=None, max_cost=None
    )
    assert (r.stop_reason, r.steps) == ("max_steps", 3)
