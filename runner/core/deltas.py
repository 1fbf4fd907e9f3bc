"""Token deltas: the pieces of a model's response while its call is still in flight.

A delta is never a journal entry: the journal records the complete response once, when the
call returns. Deltas are for followers to watch a call as it streams; whoever drives the run
may hand the loop a `DeltaSink` (the durable runner's writes them where followers in other
processes read them; `run_agent` gives none).

Around each model call the loop opens a `streaming` context for its step; an adapter that
reads its response piece by piece takes `current_stream()` on the calling thread (a context
variable, as `interrupts` is) and calls `emit` for each piece, from whichever thread reads.
Each call, and each retry of one, numbers its deltas from 0: a delta with `ordinal` 0 begins
the step's response afresh (a retry, or the call made again by a resumed run), so a follower
drops what it showed of that step before.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.store.delta_writer`, `runner.sql.deltas`, `runner.testing.memory_deltas`.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Literal, Protocol

# What a delta is a piece of: the response's text, or a tool call's arguments (JSON text).
DeltaPart = Literal["text", "arguments"]


@dataclass(frozen=True, slots=True)
class Delta:
    """One piece of the response of the model call of step `step`, the `ordinal`-th (from 0)
    of the call. `part` "text" is the model's text; "arguments" a piece of the JSON text of
    the arguments of tool call `call` (its index in the response, from 0) to `tool` (None
    until the provider has named it)."""

    step: int
    ordinal: int
    text: str
    part: DeltaPart = "text"
    call: int = 0
    tool: str | None = None


class DeltaSink(Protocol):
    """Where the deltas of a run's model calls go, as the run's driver provides it."""

    def delta(self, delta: Delta) -> None:
        """Take one delta. Called on the thread reading the response: must not block."""
        ...

    def flush(self) -> None:
        """The call ended: hand on every delta taken, before the loop journals its action
        (so no delta of a call is seen after the call's action)."""
        ...


class DeltaStream:
    """The current model call's way to its sink: numbers the deltas, drops any after the
    call ended (a reading thread given up on may still read a piece)."""

    def __init__(self, sink: DeltaSink, step: int) -> None:
        self.sink = sink
        self.step = step
        self._ordinal = 0
        self._ended = False
        self._lock = threading.Lock()

    def emit(
        self, text: str, *, part: DeltaPart = "text", call: int = 0, tool: str | None = None
    ) -> None:
        """Hand on one piece of the response (an empty piece is dropped)."""
        if not text:
            return
        with self._lock:
            if self._ended:
                return
            delta = Delta(self.step, self._ordinal, text, part, call, tool)
            self._ordinal += 1
            self.sink.delta(delta)

    def end(self) -> None:
        with self._lock:
            self._ended = True
        self.sink.flush()


_current: contextvars.ContextVar[DeltaStream | None] = contextvars.ContextVar(
    "runner_delta_stream", default=None
)


def current_stream() -> DeltaStream | None:
    """The current model call's delta stream, or None when nobody follows its pieces (take
    it on the thread that was called: a thread of the adapter's own has no context)."""
    return _current.get()


def streaming(sink: DeltaSink | None, step: int) -> AbstractContextManager[DeltaStream | None]:
    """Make the calls inside stream their pieces to `sink` as step `step`'s (nothing if
    `sink` is None); once they end, every piece is handed on before this returns. The
    stream it gives may be ended sooner, from another thread (a call given up)."""
    if sink is None:
        # Shared: a nullcontext keeps no state, and a generator's context made anew for
        # every model call of every run without a sink cost a µs a step (the in-memory step).
        return _NO_STREAM
    return _streaming(sink, step)


_NO_STREAM: AbstractContextManager[DeltaStream | None] = nullcontext(None)


@contextmanager
def _streaming(sink: DeltaSink, step: int) -> Iterator[DeltaStream | None]:
    stream = DeltaStream(sink, step)
    token = _current.set(stream)
    try:
        yield stream
    finally:
        _current.reset(token)
        stream.end()
