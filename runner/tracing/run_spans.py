"""Which spans a run gets: OpenTelemetry's when it is installed and a tracer provider is given
or configured, else the loop's `NO_SPANS`. The loop never imports this module; the run's driver
calls it and hands the loop what it returns."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runner.core.spans import NO_SPANS, RunSpans


@contextmanager
def run_trace(
    run_id: str,
    *,
    model: object,
    agent_name: str | None = None,
    release: str | None = None,
    resumes: int = 0,
    tracer_provider: Any = None,
) -> Iterator[RunSpans]:
    """The spans of one run's work in this process: OpenTelemetry's when it is installed and
    a tracer provider is given or configured globally, else `NO_SPANS`."""
    try:
        from runner.tracing import otel as tracing
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("opentelemetry"):
            raise
        yield NO_SPANS
        return
    with (
        contextlib.nullcontext(NO_SPANS)
        if not tracing.enabled(tracer_provider)
        else tracing.trace_run(
            run_id,
            model=model,
            agent_name=agent_name,
            release=release,
            resumes=resumes,
            tracer_provider=tracer_provider,
        )
    ) as spans:
        yield spans
