"""OpenTelemetry traces of runs, named and attributed by the GenAI semantic conventions.

Every run is one trace. Its trace id is derived from the run id (a hash), so the process
that resumes a run after a crash, on any machine, continues the trace the first process
began, with nothing stored. Each process's work on the run is an `invoke_agent` span whose
parent is the run's root: a span id derived the same way, which no process ever ends or
exports (a run has no single process to own it). Under it:

- `step N`: one per step that did work here (a step replayed whole from the journal after
  a crash makes no span: its spans are in the first process's part of the trace);
- `chat MODEL`: each model call, retries included (`gen_ai.operation.name = "chat"`, the
  model and provider where the model says them, `gen_ai.usage.input_tokens`/
  `output_tokens` when its usage gives them, `runner.usage.tokens` and `.cost` always);
- `execute_tool NAME`: each tool invocation (`gen_ai.tool.name`, `gen_ai.tool.call.id` =
  the idempotency key, `runner.attempt`).

Every span carries `runner.run_id`; the step, model and tool spans `runner.step`; tool
spans `runner.idempotency_key`. Only names, counts and ids are recorded, never prompts,
arguments or results. This module is imported only when `opentelemetry` is installed.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)

from runner.core.calls import CallTimedOut
from runner.core.interrupts import CallInterrupted
from runner.core.loop_host import Abandoned, reason
from runner.core.result import AgentResult
from runner.errors import RunParked, RunPaused, RunWaiting

SCOPE = "runner"


def enabled(tracer_provider: Any = None) -> bool:
    """Whether spans would be recorded: a provider is given, or one is set globally."""
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def run_context(run_id: str) -> SpanContext:
    """The run's root span context: its trace id and span id, derived from the run id."""
    digest = hashlib.sha256(f"runner run {run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1  # all zeros would be invalid
    span_id = int.from_bytes(digest[16:24], "big") or 1
    # Sampled: every process's part of the run is kept or dropped together.
    return SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )


@contextmanager
def trace_run(
    run_id: str,
    *,
    model: object,
    agent_name: str | None = None,
    release: str | None = None,
    resumes: int = 0,
    tracer_provider: TracerProvider | None = None,
) -> Iterator[RunTrace]:
    """This process's `invoke_agent` span of the run; the loop's spans go under it."""
    tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
    root = trace.set_span_in_context(NonRecordingSpan(run_context(run_id)), Context())
    # Whoever started the run (a request handler, a batch job) is linked, not the parent:
    # a run outlives its caller, and its trace is the run's own.
    caller = trace.get_current_span().get_span_context()
    links = [Link(caller)] if caller.is_valid else []
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": run_id,
        "runner.run_id": run_id,
        "runner.resumes": resumes,
    }
    if agent_name:
        attributes["gen_ai.agent.name"] = agent_name
    if release:
        attributes["runner.release"] = release
    name = f"invoke_agent {agent_name}" if agent_name else "invoke_agent"
    span = tracer.start_span(name, root, SpanKind.INTERNAL, attributes, links)
    traced = RunTrace(tracer, trace.set_span_in_context(span, root), run_id, model)
    try:
        yield traced
    except BaseException as exc:
        if not _left_for_later(span, exc):
            _failed(span, exc)
        raise
    finally:
        traced.close()
        span.end()


class RunTrace:
    """The spans of one run in this process (see the module docstring)."""

    def __init__(self, tracer: Tracer, context: Context, run_id: str, model: object) -> None:
        self.tracer = tracer
        self.context = context
        self.run_id = run_id
        self.agent_span = trace.get_current_span(context)
        name = getattr(model, "model", None)
        provider = getattr(model, "provider", None)
        self.model = name if isinstance(name, str) and name else None
        self.provider = provider if isinstance(provider, str) and provider else None
        self._step: _Step | None = None
        # A step whose model call was given up on the loop's thread, for the loop's next
        # thread to take up (`step`); `_closed` once the run's span is ending.
        self._lock = threading.Lock()
        self._handed: _Step | None = None
        self._closed = False
        # A step's span is opened by its first call, and the calls of a step replayed from
        # the journal (no model call) come from their own threads at once: one opens it.
        self._opening = threading.Lock()

    # -- the loop's side (runner.spans.Spans) ---------------------------------------------

    @contextmanager
    def step(self, step: int) -> Iterator[object]:
        # Opened lazily, by the step's first model or tool call: a step replayed whole from
        # the journal does no work here and makes no span. A step whose call was given up
        # goes on here under the span it had (the loop begins again with that step).
        with self._lock:
            handed, self._handed = self._handed, None
        if handed is not None and handed.number != step:  # never: see runner.core.spans
            _end(handed)
            handed = None
        current = self._step = handed or _Step(step, time.time_ns())
        try:
            yield current
        except Abandoned:
            raise  # its call was given up: the step goes on on another thread, which ends it
        except BaseException as exc:
            if current.span is not None and not _left_for_later(current.span, exc):
                _failed(current.span, exc)
            self._ended(current)
            raise
        self._ended(current)

    def _ended(self, current: _Step) -> None:
        _end(current)
        self._step = None

    def _hand_over(self, current: _Step | None) -> None:
        """The step's call was given up: the loop's next thread takes the step up, or, if
        the run's span is ending (its caller is gone), nobody will, and it ends now."""
        if current is None:
            return
        with self._lock:
            if not self._closed:
                self._handed = current
                return
        _end(current)

    def close(self) -> None:
        """The run's span is ending: a step handed over and never taken up ends first."""
        with self._lock:
            self._closed = True
            handed, self._handed = self._handed, None
        if handed is not None:
            _end(handed)

    @contextmanager
    def model_call(self, step: int) -> Iterator[_ModelCall]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "runner.run_id": self.run_id,
            "runner.step": step,
        }
        if self.model:
            attributes["gen_ai.request.model"] = self.model
        if self.provider:
            attributes["gen_ai.provider.name"] = self.provider
        name = f"chat {self.model}" if self.model else "chat"
        handed_over = functools.partial(self._hand_over, self._step)
        with self._span(name, SpanKind.CLIENT, attributes) as span:
            call = _ModelCall(span, handed_over)
            try:
                yield call
            except (CallTimedOut, CallInterrupted) as exc:
                # Given up where it was made (an async model's call, or one made without a
                # loop thread): the same span as one given up on the loop's own thread.
                call.gave_up(reason(exc))
                raise

    def tool_call(
        self, step: int, tool: str, key: str, attempt: int
    ) -> AbstractContextManager[object]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": key,
            "runner.run_id": self.run_id,
            "runner.step": step,
            "runner.idempotency_key": key,
            "runner.attempt": attempt,
        }
        return self._span(f"execute_tool {tool}", SpanKind.INTERNAL, attributes)

    # -- the run's side -------------------------------------------------------------------

    def finished(self, result: AgentResult) -> None:
        span = self.agent_span
        span.set_attribute("runner.stop_reason", str(result.stop_reason))
        span.set_attribute("runner.steps", result.steps)
        span.set_attribute("runner.tokens", result.tokens)
        span.set_attribute("runner.cost", result.cost)

    # -- spans ----------------------------------------------------------------------------

    @contextmanager
    def _span(self, name: str, kind: SpanKind, attributes: Mapping[str, Any]) -> Iterator[Any]:
        span = self.tracer.start_span(name, self._parent(), kind, attributes)
        try:
            # Ended here, not by use_span: a call given up ended its span already.
            with trace.use_span(
                span,
                end_on_exit=False,
                record_exception=False,  # its message: see _failed
                set_status_on_exception=False,
            ):
                yield span
        except Abandoned:
            raise  # given up on another thread, which ended the span (_ModelCall.given_up)
        except BaseException as exc:
            if span.is_recording():  # not a call given up on its own thread (gave_up)
                _failed(span, exc)
                span.end()
            raise
        span.end()

    def _parent(self) -> Context:
        current = self._step
        if current is None:
            return self.context  # a call outside any step (never, today): under the run
        span = current.span
        if span is None:
            with self._opening:
                span = current.span
                if span is None:
                    span = current.span = self.tracer.start_span(
                        f"step {current.number}",
                        self.context,
                        SpanKind.INTERNAL,
                        {"runner.run_id": self.run_id, "runner.step": current.number},
                        start_time=current.started_ns,
                    )
        return trace.set_span_in_context(span, self.context)


def _left_for_later(span: trace.Span, exc: BaseException) -> bool:
    """Mark `span` if `exc` only leaves the run for later, as the run is (no failure): paused
    (a worker stopping gracefully), parked (`runner.parked`: until when, UTC;
    `runner.parked.limit`: the provider limit with no room, absent when its tree's budget is
    held by calls in flight) or waiting (`runner.waiting`: for `sub-agents`, an `answer`, or
    both). A Jaeger user must not see a red run that is fine."""
    if isinstance(exc, RunPaused):
        span.set_attribute("runner.paused", True)
    elif isinstance(exc, RunParked):
        until = datetime.fromtimestamp(exc.until, UTC)
        span.set_attribute("runner.parked", until.isoformat(timespec="milliseconds"))
        if exc.limit is not None:
            span.set_attribute("runner.parked.limit", exc.limit)
    elif isinstance(exc, RunWaiting):
        span.set_attribute("runner.waiting", list(exc.waits_for) or ["answer"])
    else:
        return False
    return True


def _failed(span: trace.Span, exc: BaseException) -> None:
    """Mark `span` failed by `exc`'s type alone. An exception's words can hold what a span
    never records: a tool's arguments (`ValueError: bad card 4111...`), a provider's echo
    of a key, text no exporter can encode. So the event and the status name the type only.
    """
    kind = type(exc).__qualname__
    span.add_event("exception", {"exception.type": kind})
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))


class _Step:
    def __init__(self, number: int, started_ns: int) -> None:
        self.number = number
        self.started_ns = started_ns
        self.span: trace.Span | None = None


def _end(step: _Step) -> None:
    if step.span is not None:
        step.span.end()


class _ModelCall:
    def __init__(self, span: trace.Span, handed_over: Callable[[], None]) -> None:
        self.span = span
        self._handed_over = handed_over

    def given_up(self, why: str) -> None:
        """Given up on the waiting thread while the loop's thread still runs the call: the
        span ends now (its thread may return much later, or never), and the step goes on
        on the loop's next thread."""
        self.gave_up(why)
        self._handed_over()

    def gave_up(self, why: str) -> None:
        """The span ends as a call given up for `why`: an error named by the reason (no
        traceback: the call raised nothing, the run stopped waiting for it)."""
        span = self.span
        span.set_attribute("runner.given_up", why)
        span.set_attribute("error.type", why)
        span.add_event("runner.given_up", {"runner.given_up": why})
        span.set_status(Status(StatusCode.ERROR, f"given up: {why}"))
        span.end()

    def returned(self, output: Any) -> None:
        """Token usage from what the model returned, as far as it says (never trusted)."""
        usage = output.get("usage") if isinstance(output, Mapping) else None
        for name, value in _usage(usage).items():
            self.span.set_attribute(name, value)

    def limited(self, limit: str, waited: float) -> None:
        """The provider limit the call drew from, and how long the run waited for room."""
        self.span.set_attribute("runner.limit", limit)
        self.span.set_attribute("runner.limit.waited_seconds", waited)


# Attribute integers are 64-bit in every exporter; a model may report any amount.
_INT_MAX = 2**63 - 1


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    try:
        return min(int(value), _INT_MAX)
    except (OverflowError, ValueError):
        return None


def _usage(usage: object) -> dict[str, int | float]:
    found: dict[str, int | float] = {}
    if isinstance(usage, Mapping):
        given, taken = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
        if given is not None:
            found["gen_ai.usage.input_tokens"] = given
        if taken is not None:
            found["gen_ai.usage.output_tokens"] = taken
        total = _count(usage.get("tokens"))
        if total is None and given is not None and taken is not None:
            total = min(given + taken, _INT_MAX)
        cost = usage.get("cost")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
            found["runner.usage.cost"] = float(cost)
    else:
        total = _count(usage)
    if total is not None:
        found["runner.usage.tokens"] = total
    return found
