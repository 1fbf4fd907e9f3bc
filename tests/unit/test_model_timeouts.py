"""No model call without a deadline: a plain model callable that never answers is given up
after `model_timeout` (and retried like any failure), a cancel or a pause reaches it while
it hangs, and a model that answers in time never notices any of this."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, Budgets, run_agent
from runner.core.calls import CallTimedOut, invoke
from runner.core.interrupts import CallInterrupted
from runner.defaults import DEFAULT_MODEL_TIMEOUT


class Hanging:
    """A model that never answers until the test lets it go (at its end), counting calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        self.entered.set()
        self.release.wait()
        return {"type": "final", "content": "too late"}


@pytest.fixture
def hanging() -> Iterator[Hanging]:
    model = Hanging()
    yield model
    model.release.set()  # the abandoned threads end with the test


def test_every_model_call_has_a_total_deadline_by_default() -> None:
    assert Budgets().model_timeout == DEFAULT_MODEL_TIMEOUT == 600.0
    assert Agent(lambda t: {"type": "final", "content": ""}).budgets.model_timeout == 600.0
    assert Agent(lambda t: {}, model_timeout=5).budgets.model_timeout == 5


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "10", True, 2e9])
def test_a_model_timeout_that_is_no_time_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="model_timeout"):
        Budgets(model_timeout=bad)  # type: ignore[arg-type]


def test_a_model_that_never_answers_is_given_up_and_retried(hanging: Hanging) -> None:
    result = run_agent(hanging, {}, "task", model_timeout=0.05, model_retries=2, retry_backoff=0)
    assert result.stop_reason == "model_error"
    assert "longer than its model_timeout, 0.05 s" in (result.error or ""), result.error
    assert hanging.calls == 3  # the first call and two retries, each given up


def test_the_run_deadline_still_wins_when_it_comes_first(hanging: Hanging) -> None:
    # Long enough for the model to be asked on a loaded machine (0.05 s ran out first once,
    # at load 34), far shorter than the model's own timeout.
    result = run_agent(hanging, {}, "task", max_seconds=0.5, model_timeout=600)
    assert result.stop_reason == "time_budget"
    assert hanging.calls == 1


def test_a_cancel_reaches_a_model_call_that_never_answers(hanging: Hanging) -> None:
    cancel = threading.Event()
    results: list[Any] = []
    running = threading.Thread(
        target=lambda: results.append(
            run_agent(hanging, {}, "task", cancel=cancel, model_timeout=None)
        )
    )
    running.start()
    assert hanging.entered.wait(30)
    cancel.set()
    running.join(30)
    assert not running.is_alive()
    assert results[0].stop_reason == "cancelled"
    assert hanging.calls == 1


def test_a_model_that_answers_in_time_is_untouched() -> None:
    seen: list[str] = []

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        return {"type": "final", "content": "ok"}

    result = run_agent(model, {}, "task", model_timeout=30)
    assert (result.stop_reason, result.output) == ("final", "ok")
    assert seen and seen[0] != threading.main_thread().name  # it ran where it can be watched


def test_invoke_gives_up_at_its_timeout_or_when_watched_to() -> None:
    release = threading.Event()
    try:
        with pytest.raises(CallTimedOut):
            invoke(release.wait, (), {}, 0.01)
        with pytest.raises(CallInterrupted, match="paused"):
            invoke(release.wait, (), {}, None, watch=lambda: "paused")
    finally:
        release.set()
    # An exception of the call itself reaches the caller as it was, traceback and all.
    with pytest.raises(ZeroDivisionError):
        invoke(lambda: 1 / 0, (), {}, 5.0, watch=lambda: None)
    assert invoke(lambda x: x + 1, (1,), {}, 5.0, watch=lambda: None) == 2


def test_threads_are_spare_between_calls_and_one_hung_call_holds_up_no_other() -> None:
    release = threading.Event()
    try:
        with pytest.raises(CallTimedOut):
            invoke(release.wait, (), {}, 0.01)  # leaves one thread busy
        names = {invoke(lambda: threading.current_thread().name, (), {}, 5.0) for _ in range(50)}
    finally:
        release.set()
    assert names == {"runner-call"}
    before = threading.active_count()
    for _ in range(50):
        invoke(lambda: None, (), {}, 5.0)
    assert threading.active_count() <= before + 1  # reused, not one more per call


def test_a_step_whose_call_was_given_up_goes_on_once_and_the_late_answer_is_dropped() -> None:
    # run_agent's loop calls the model inline on a thread of its own; a call given up there
    # is left to its thread, and the step goes on from its start on another.
    release = threading.Event()
    late = threading.Event()
    calls: list[int] = []
    ran: list[int] = []

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        calls.append(len(transcript))
        if len(calls) == 2:  # step 2's first attempt hangs, and answers only once let go
            release.wait(30)
            late.set()
            return {"type": "final", "content": "late"}
        if len(transcript) < 5:
            return {"type": "tool", "name": "work", "args": {"n": len(transcript)}}
        return {"type": "final", "content": "done"}

    def work(n: int) -> int:
        ran.append(n)
        return n

    result = run_agent(model, {"work": work}, "task", model_timeout=0.2, retry_backoff=0)
    release.set()
    assert late.wait(30)
    assert (result.stop_reason, result.output) == ("final", "done")
    assert calls == [1, 3, 3, 5]  # step 2 asked twice (the first given up), then step 3
    assert ran == [1, 3]  # each step's tool ran once
    assert [m["role"] for m in result.transcript] == ["user"] + ["assistant", "tool"] * 2 + [
        "assistant"
    ]
