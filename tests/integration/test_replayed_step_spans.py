"""A step replayed from the journal after a crash, whose calls run in parallel: its action is
not asked for again, so no model call opens its `step N` span, and its calls' threads both
come to open it at once. Exactly one `step N` span must be made, every tool span under it.

The race is made certain, not hoped for: the first thread to start a `step` span waits there
until the second thread has come for the step's span too (`RunTrace._parent`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runner import Agent, Runner, tool
from runner.testing import FunctionModel
from runner.tracing import otel

from .support import Crash, Transcript, crash

# Only a bound if the code under test is broken in a new way: the waits below end on
# conditions the run itself brings about.
WAIT = 30.0


class Started(SpanProcessor):
    """Names of the spans started, ended or not (a span never ended is never exported)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with self.lock:
            self.names.append(span.name)


class Tools:
    """Two calls of one step, each crashing its process the first time (after the step's
    action was journaled); on the resume they run again (idempotent), in parallel."""

    def __init__(self) -> None:
        self.crashing = True
        self.lock = threading.Lock()
        self.started = 0
        self.both_started = threading.Event()

    def tools(self) -> dict[str, Any]:
        def begin() -> None:
            with self.lock:
                self.started += 1
                if self.started == 2:
                    self.both_started.set()
            if self.crashing:
                # Both calls are in flight (neither journaled) when the process dies.
                assert self.both_started.wait(WAIT)
                raise Crash

        @tool(idempotent=True)
        def left(x: int) -> str:
            begin()
            return f"left {x}"

        @tool(idempotent=True)
        def right(x: int) -> str:
            begin()
            return f"right {x}"

        return {"left": left, "right": right}


def model() -> FunctionModel:
    def answer(transcript: Transcript) -> dict[str, Any]:
        if len(transcript) == 1:
            calls = [
                {"id": "a", "name": "left", "args": {"x": 1}},
                {"id": "b", "name": "right", "args": {"x": 2}},
            ]
            return {"type": "tool", "calls": calls}
        results = [m["content"] for m in transcript if m["role"] == "tool"]
        return {"type": "final", "content": " | ".join(results)}

    return FunctionModel(answer)


@pytest.fixture
def racing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Whoever starts a `step` span first waits there until two threads have asked for the
    step's span: unfixed, both start one."""
    asked = threading.Condition()
    askers: set[int] = set()
    parent = otel.RunTrace._parent
    start_span = sdk_trace.Tracer.start_span

    def watched_parent(self: otel.RunTrace) -> Context:
        with asked:
            askers.add(threading.get_ident())
            asked.notify_all()
        return parent(self)

    def held_start_span(self: sdk_trace.Tracer, name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("step "):
            with asked:
                asked.wait_for(lambda: len(askers) >= 2, timeout=WAIT)
        return start_span(self, name, *args, **kwargs)

    monkeypatch.setattr(otel.RunTrace, "_parent", watched_parent)
    monkeypatch.setattr(sdk_trace.Tracer, "start_span", held_start_span)
    yield


def test_a_replayed_step_of_parallel_calls_has_one_step_span(db_url: str, racing: None) -> None:
    calls = Tools()
    agent = Agent(model(), calls.tools(), name="pair")
    with Runner(db_url) as runner:
        with pytest.raises(Crash):
            runner.run(agent, "go", id="replayed")
        crash(runner.engine, "replayed")

    exporter = InMemorySpanExporter()
    started = Started()
    provider = TracerProvider()
    provider.add_span_processor(started)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    calls.crashing = False
    with Runner(db_url, tracer_provider=provider) as runner:
        result = runner.resume("replayed", agent=agent)
    provider.shutdown()
    assert (result.stop_reason, result.output) == ("final", "left 1 | right 2")

    assert started.names.count("step 1") == 1
    spans: list[ReadableSpan] = list(exporter.get_finished_spans())
    (step,) = [s for s in spans if s.name == "step 1"]
    tool_spans = [s for s in spans if s.name.startswith("execute_tool")]
    assert sorted(s.name for s in tool_spans) == ["execute_tool left", "execute_tool right"]
    assert all(s.parent is not None for s in tool_spans)
    assert {s.parent.span_id for s in tool_spans if s.parent} == {step.context.span_id}
    # No model call in step 1: its action came from the journal.
    assert [s.name for s in spans if s.name.startswith("chat")] == ["chat"]
