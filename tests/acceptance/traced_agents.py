"""An agent whose process exports its spans to a file as they end, for the trace tests.

Loaded by path (`runner run .../traced_agents.py:agent`). When RUNNER_TEST_SPANS names a
file, importing it sets the global tracer provider with a span processor that appends each
finished span to that file as one JSON line before the span's `end()` returns: a span the
process finished is on disk even if a SIGKILL comes right after.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from runner import Agent, tool
from runner.core.faults import fault

SPANS_VARIABLE = "RUNNER_TEST_SPANS"
STEPS = 4


def span_json(span: ReadableSpan) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": span.context.trace_id,
        "span_id": span.context.span_id,
        "parent_id": span.parent.span_id if span.parent is not None else None,
        "attributes": dict(span.attributes or {}),
        "pid": os.getpid(),
    }


class JsonLines(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(span_json(span)) + "\n")
        return SpanExportResult.SUCCESS


if os.environ.get(SPANS_VARIABLE):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(os.environ[SPANS_VARIABLE])))
    trace.set_tracer_provider(provider)


@tool(idempotent=True)
def add(a: int, b: int) -> int:
    """Runs again after a crash (attempt 2): it is a pure function."""
    fault("during_tool")
    return a + b


class Counter:
    model = "scripted-1"
    provider = "scripted"

    def __call__(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        done = [m for m in transcript if m["role"] == "tool"]
        usage = {"input_tokens": 5, "output_tokens": 2}
        if len(done) < STEPS - 1:
            total = int(done[-1]["content"]) if done else 0
            return {"type": "tool", "name": "add", "args": {"a": total, "b": 1}, "usage": usage}
        return {"type": "final", "content": done[-1]["content"], "usage": usage}


agent = Agent(Counter(), {"add": add}, name="counter", release="t1")
