"""What the loop tells a tracer: it is inside a step, a model call or a tool call.

The loop calls a `Spans` object around each of the three and knows nothing else of tracing;
this module imports no tracing library. The run's driver (`run_agent`, the `Runner`) hands the
loop a `Spans`: `runner.tracing` makes one with OpenTelemetry when it is installed and a tracer
provider is configured; otherwise every run gets `NO_SPANS`, which does nothing and costs next
to nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runner.core.result import AgentResult


class ModelCall(Protocol):
    def returned(self, output: Any) -> None:
        """What the model returned (its usage is read from it)."""

    def given_up(self, why: str) -> None:
        """The call was given up while its thread still runs it (runner.core.loop_host), for
        `why` (`timeout`, `cancelled`, `paused`, ...): its span ends now, and its step goes on
        on the loop's next thread, which enters `step` again with the same number. The
        thread left with the call leaves the contexts it was in by raising `Abandoned`, which
        must end nothing: the span is over, and the step is no longer that thread's."""

    def limited(self, limit: str, waited: float) -> None:
        """The call drew from provider limit `limit`, after the run waited `waited` seconds
        in line for it (0: it found room at once)."""


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

    def given_up(self, why: str) -> None:
        pass

    def limited(self, limit: str, waited: float) -> None:
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
