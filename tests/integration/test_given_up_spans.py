"""What a trace shows of a model call given up on the loop's own thread (runner.core.loop_host):
at its `model_timeout`, by a cancel, by a pause. The call's span ends when it was given up, not
when its thread finally returns, with status ERROR and `runner.given_up` saying why (never a
Python `Abandoned`); a retried attempt is its sibling under the same step span; every span ends
once, and the thread left with the call adds nothing to the trace when it returns."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from runner import Agent, Budgets, Runner, run_agent
from runner.core import loop
from runner.core.journal import MemoryJournal
from runner.core.loop import drive
from runner.core.loop_host import Abandoned
from runner.errors import RunPaused
from runner.tracing.run_spans import run_trace
from tests.integration.exported_spans import Exported


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[Exported]:
    """An in-memory exporter, its provider also the global one for this test (run_agent's)."""
    found = Exported()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", found.provider)
    yield found
    found.provider.shutdown()


@pytest.fixture
def unwound(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a loop thread whose call was given up has left all its steps (and so every
    span context it was in): the loop's outermost frame on that thread, watched."""
    left = threading.Event()
    steps_from = loop._Loop.steps_from

    def watched(self: loop._Loop, first: int, spans: Any) -> Any:
        try:
            return steps_from(self, first, spans)
        except Abandoned:
            left.set()
            raise

    monkeypatch.setattr(loop._Loop, "steps_from", watched)
    return left


class Stuck:
    """A model whose first call hangs until the test lets it go; its later calls answer."""

    model = "gpt-test"

    def __init__(self, unwound: threading.Event) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.unwound = unwound

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.release.wait(60)
            return {"type": "final", "content": "too late"}
        return {"type": "final", "content": "done"}

    def let_go(self) -> None:
        """Let the given-up call return, and wait for its thread to unwind."""
        self.release.set()
        assert self.unwound.wait(30)


@pytest.fixture
def stuck(unwound: threading.Event) -> Iterator[Stuck]:
    model = Stuck(unwound)
    yield model
    model.release.set()  # the given-up thread ends with the test


@pytest.fixture
def otel_warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The SDK's complaints (a span ended twice, an attribute set on an ended span) are
    logged warnings, not exceptions: the tests read them here."""
    caplog.set_level(logging.WARNING, logger="opentelemetry")
    return caplog


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def assert_given_up(span: ReadableSpan, why: str) -> None:
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["runner.given_up"] == why
    assert attrs(span)["error.type"] == why
    assert [event.name for event in span.events] == ["runner.given_up"]
    # Why it was given up, never the thread's way out.
    assert "Abandoned" not in repr((span.status.description, attrs(span), span.events))


def assert_nothing_late(exported: Exported, before: list[ReadableSpan], stuck: Stuck) -> None:
    """The given-up call's thread returns and exits: the trace stays as it was."""
    stuck.let_go()
    assert exported.spans == before


def assert_no_complaints(caplog: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []


def paused_meanwhile(run: Callable[[threading.Event], object], stuck: Stuck) -> list[BaseException]:
    """`run(pause)` on a thread of its own, paused once its model call is stuck in `stuck`;
    what it raised."""
    pause = threading.Event()
    failures: list[BaseException] = []

    def running() -> None:
        try:
            run(pause)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=running)
    thread.start()
    assert stuck.entered.wait(30)
    pause.set()
    thread.join(30)
    assert not thread.is_alive()
    return failures


def assert_paused(exported: Exported, run_span: str) -> list[ReadableSpan]:
    """A trace of a run paused in its first model call: the call given up, and the step and
    the run (span `run_span`) left for a resume, not failed (a pause is a graceful stop)."""
    spans = exported.spans
    assert [s.name for s in spans] == ["chat gpt-test", "step 1", run_span]
    given_up, step, run = spans
    assert_given_up(given_up, "paused")
    assert parent_of(given_up) == step.context.span_id
    for left in (step, run):
        assert left.status.status_code is StatusCode.UNSET, left.name
        assert attrs(left)["runner.paused"] is True, left.name
    assert parent_of(step) == run.context.span_id
    return spans


def test_a_call_given_up_at_its_model_timeout_and_retried(
    exported: Exported, stuck: Stuck, otel_warnings: pytest.LogCaptureFixture
) -> None:
    result = run_agent(stuck, {}, "task", model_timeout=0.5, retry_backoff=0)
    assert (result.stop_reason, result.output, stuck.calls) == ("final", "done", 2)

    spans = exported.spans  # read while the given-up call still hangs
    assert [s.name for s in spans] == ["chat gpt-test", "chat gpt-test", "step 1", "invoke_agent"]
    given_up, retried, step, agent = spans
    assert_given_up(given_up, "timeout")
    assert given_up.status.description == "given up: timeout"
    assert retried.status.status_code is StatusCode.UNSET
    # Siblings under the one step span, the given-up one ended before the retry began.
    assert parent_of(given_up) == parent_of(retried) == step.context.span_id
    assert given_up.end_time is not None and retried.start_time is not None
    assert given_up.end_time <= retried.start_time
    assert attrs(given_up)["runner.step"] == attrs(retried)["runner.step"] == 1
    assert step.status.status_code is StatusCode.UNSET
    assert parent_of(step) == agent.context.span_id
    assert attrs(agent)["runner.stop_reason"] == "final"

    assert_nothing_late(exported, spans, stuck)
    assert_no_complaints(otel_warnings)


def test_a_call_given_up_for_a_later_step_keeps_every_step_in_its_place(
    exported: Exported, unwound: threading.Event, otel_warnings: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    calls: list[int] = []

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        calls.append(len(transcript))
        if len(calls) == 2:  # step 2's first attempt hangs
            release.wait(60)
        if len(transcript) < 5:
            return {"type": "tool", "name": "work", "args": {"n": len(transcript)}}
        return {"type": "final", "content": "done"}

    def work(n: int) -> int:
        return n

    try:
        result = run_agent(model, {"work": work}, "task", model_timeout=0.5, retry_backoff=0)
        spans = exported.spans
    finally:
        release.set()
    assert unwound.wait(30)
    assert result.stop_reason == "final"
    assert [(s.name, attrs(s).get("runner.step")) for s in spans] == [
        ("chat", 1),
        ("execute_tool work", 1),
        ("step 1", 1),
        ("chat", 2),
        ("chat", 2),
        ("execute_tool work", 2),
        ("step 2", 2),
        ("chat", 3),
        ("step 3", 3),
        ("invoke_agent", None),
    ]
    steps = {attrs(s)["runner.step"]: s.context.span_id for s in by_name(spans, "step")}
    for span in spans:
        if span.name.startswith(("chat", "execute_tool")):
            assert parent_of(span) == steps[attrs(span)["runner.step"]], span.name
    assert_given_up(spans[3], "timeout")
    assert exported.spans == spans
    assert_no_complaints(otel_warnings)


def test_a_call_given_up_by_a_cancel(
    exported: Exported, stuck: Stuck, otel_warnings: pytest.LogCaptureFixture
) -> None:
    cancel = threading.Event()
    results: list[Any] = []
    running = threading.Thread(
        target=lambda: results.append(
            run_agent(stuck, {}, "task", cancel=cancel, model_timeout=None)
        )
    )
    running.start()
    assert stuck.entered.wait(30)
    cancel.set()
    running.join(30)
    assert not running.is_alive()
    assert results[0].stop_reason == "cancelled"

    spans = exported.spans
    assert [s.name for s in spans] == ["chat gpt-test", "step 1", "invoke_agent"]
    given_up, step, agent = spans
    assert_given_up(given_up, "cancelled")
    assert parent_of(given_up) == step.context.span_id
    assert step.status.status_code is StatusCode.UNSET  # the step ended the run: cancelled
    assert parent_of(step) == agent.context.span_id
    assert attrs(agent)["runner.stop_reason"] == "cancelled"

    assert_nothing_late(exported, spans, stuck)
    assert_no_complaints(otel_warnings)


def test_a_call_given_up_by_a_pause(
    exported: Exported, stuck: Stuck, otel_warnings: pytest.LogCaptureFixture
) -> None:
    journal = MemoryJournal()

    def paused_run(pause: threading.Event) -> None:
        with run_trace(journal.run_id, model=stuck, tracer_provider=exported.provider) as spans:
            drive(stuck, {}, "task", Budgets(model_timeout=None), journal,
                  pause=pause, spans=spans, own_thread=True)  # fmt: skip

    assert [type(exc) for exc in paused_meanwhile(paused_run, stuck)] == [RunPaused]
    spans = assert_paused(exported, "invoke_agent")
    assert_nothing_late(exported, spans, stuck)
    assert_no_complaints(otel_warnings)


def test_a_durable_run_s_call_given_up_at_its_model_timeout_and_retried(
    db_url: str, exported: Exported, stuck: Stuck, otel_warnings: pytest.LogCaptureFixture
) -> None:
    agent = Agent(stuck, {}, name="stuck", model_timeout=0.5, retry_backoff=0)
    with Runner(db_url, tracer_provider=exported.provider) as runner:
        result = runner.run(agent, "task", id="given-up-1")
    assert (result.stop_reason, result.output) == ("final", "done")

    spans = exported.spans
    assert [s.name for s in spans] == [
        "chat gpt-test",
        "chat gpt-test",
        "step 1",
        "invoke_agent stuck",
    ]
    given_up, retried, step, invoked = spans
    assert_given_up(given_up, "timeout")
    assert parent_of(given_up) == parent_of(retried) == step.context.span_id
    assert parent_of(step) == invoked.context.span_id

    assert_nothing_late(exported, spans, stuck)
    assert_no_complaints(otel_warnings)


def test_a_durable_run_s_call_given_up_by_a_cancel(
    db_url: str, exported: Exported, stuck: Stuck, otel_warnings: pytest.LogCaptureFixture
) -> None:
    agent = Agent(stuck, {}, name="stuck", model_timeout=None)
    results: list[Any] = []
    # A short lease: its heartbeat, a third of it, is what brings the cancel to the call.
    with Runner(db_url, tracer_provider=exported.provider, lease_seconds=1.5) as runner:
        running = threading.Thread(
            target=lambda: results.append(runner.run(agent, "task", id="given-up-2"))
        )
        running.start()
        assert stuck.entered.wait(30)
        runner.cancel("given-up-2")
        running.join(30)
        assert not running.is_alive()
    assert results[0].stop_reason == "cancelled"

    spans = exported.spans
    assert [s.name for s in spans] == ["chat gpt-test", "step 1", "invoke_agent stuck"]
    given_up, step, invoked = spans
    assert_given_up(given_up, "cancelled")
    assert parent_of(given_up) == step.context.span_id
    assert attrs(invoked)["runner.stop_reason"] == "cancelled"

    assert_nothing_late(exported, spans, stuck)
    assert_no_complaints(otel_warnings)


def test_a_durable_run_s_call_given_up_by_a_pause(
    db_url: str, exported: Exported, stuck: Stuck, otel_warnings: pytest.LogCaptureFixture
) -> None:
    # What a worker does when it stops gracefully: its `stopping` event is the pause, and
    # it gives the run back on RunPaused (which tracing once swallowed, so the worker met
    # an unbound result instead and kept the run until its lease expired).
    # Executed here, never loaded by a worker: its ref is a placeholder.
    agent = Agent(stuck, {}, name="stuck", model_timeout=None, ref="x:y")
    with Runner(db_url, tracer_provider=exported.provider) as runner:
        run_id = runner.submit(agent, "task", id="given-up-3")
        claim = runner.store.claim_run(
            run_id, lease_seconds=runner.lease_seconds, max_resumes=runner.max_resumes
        )
        failures = paused_meanwhile(lambda pause: runner.execute(claim, agent, pause=pause), stuck)
    assert [type(exc) for exc in failures] == [RunPaused]
    spans = assert_paused(exported, "invoke_agent stuck")
    assert_nothing_late(exported, spans, stuck)
    assert_no_complaints(otel_warnings)
