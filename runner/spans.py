"""What the loop tells a tracer: it is inside a step, a model call or a tool call.

The loop calls a `Spans` object around each of the three and knows nothing else of tracing;
this module imports no tracing library. `runner.tracing` implements `Spans` with
OpenTelemetry when it is installed and a tracer provider is configured; otherwise every run
gets `NO_SPANS`, which does nothing and costs next to nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runner.result import AgentResult


class ModelCall(Protocol):
    def returned(self, output: Any) -> None:
        """What the model returned (its usage is read from it)."""


class Spans(Protocol):
    """The loop's side of tracing: a context around each step, model call and tool call."""

    def step(self, step: int) -> AbstractContextManager[object]: ...

    def model_call(self, step: int) -> AbstractContextManager[ModelCall]: ...

    def tool_call(
        self, step: int, tool: str, key: str, attempt: int
    ) -> AbstractContextManager[object]: ...


class RunSpans(Spans, Protocol):
    """Spans of one run in one process, told how the run ended (or paused) there."""

    def finished(self, result: AgentResult) -> None: ...


class _NoModelCall:
    def returned(self, output: Any) -> None:
        pass


_NO_MODEL_CALL = _NoModelCall()


# nullcontext holds no state between enter and exit: one of each serves every call.
_EMPTY: AbstractContextManager[object] = nullcontext()
_EMPTY_MODEL_CALL: AbstractContextManager[ModelCall] = nullcontext(_NO_MODEL_CALL)


class NoSpans:
    """Tracing off: every context is empty."""

    def step(self, step: int) -> AbstractContextManager[object]:
        return _EMPTY

    def model_call(self, step: int) -> AbstractContextManager[ModelCall]:
        return _EMPTY_MODEL_CALL

    def tool_call(
        self, step: int, tool: str, key: str, attempt: int
    ) -> AbstractContextManager[object]:
        return _EMPTY

    def finished(self, result: AgentResult) -> None:
        pass


NO_SPANS = NoSpans()


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
        from runner import tracing
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
