"""A run's loop on a thread of its own, so that its model calls need no thread of their own.

Python cannot kill a thread, so a sync model call that may never return (it has a
`model_timeout`, or a cancel must reach it) used to be handed to a spare thread while the
loop waited for it: two cross-thread wake-ups a call, which were most of an in-memory
step's CPU (docs/performance/step.md, the in-memory step). Here the roles are swapped once for
the whole run: the loop runs on a thread of its own and calls the model inline, and the
caller's thread waits for the run's end and, meanwhile, for the deadline of the call in
flight, sleeping through calls that end in time (it wakes about once a `model_timeout`).

A call that overruns, or whose watch names a reason, is abandoned where it is: its thread
is left to finish the call and then unwinds and exits (`Abandoned`), touching nothing, and
the loop goes on from the start of that step on a fresh thread, told what the call would
have raised. That is sound because nothing of the step after the call has run: the loop's
objects hold the run as it was when the call began (`_Loop.resume`). What the loop left
with the call is told at once (`Carried.given_up`), not when its thread returns (which may
be never): the call's span ends then, and its step's goes on with the step.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from runner.core import calls, watching
from runner.core.calls import CallTimedOut
from runner.core.interrupts import CallInterrupted
from runner.core.watching import Watch

T = TypeVar("T")
C = TypeVar("C", bound="Carried")


class Carried(Protocol):
    """What the loop left with a call for the thread that goes on if it is abandoned."""

    def given_up(self, why: str) -> None:
        """Told once, as the call is abandoned, why (`reason`): on the thread that gives it
        up, or on the loop's own if its caller was gone before the call began."""
        ...


class Abandoned(BaseException):
    """Raised on a loop thread whose call was given up, once the call returns: the thread
    unwinds and exits, and the run goes on elsewhere. A BaseException, so that no handler
    of the loop's takes it for the model's failure."""


@dataclass
class Overrun(Generic[C]):
    """An abandoned call: the loop's step it was made in, what it raised for its caller
    (CallTimedOut, CallInterrupted, or what its watch raised) and what the caller left to
    go on with."""

    step: int
    error: Exception
    carried: C


def reason(error: BaseException) -> str:
    """Why a call was given up, in a word: `timeout`, the watch's reason (`cancelled`,
    `paused`), else the type of what stopped it (a watch that failed, a caller gone)."""
    if isinstance(error, CallTimedOut):
        return "timeout"
    if isinstance(error, CallInterrupted):
        return error.reason
    return type(error).__qualname__


class _Flight:
    __slots__ = ("abandoned", "carried", "deadline", "step", "timeout")

    def __init__(self, step: int, timeout: float | None, carried: Carried) -> None:
        self.step = step
        self.timeout = timeout
        self.deadline = math.inf if timeout is None else time.monotonic() + max(timeout, 0.0)
        self.carried = carried
        self.abandoned = False


class LoopHost:
    """Runs one loop on a spare thread (`run`) and watches the model call in flight there
    (`call`): its deadline, and `watch` (a cancel, a pause)."""

    def __init__(self, watch: Watch | None, timeout: float | None = None) -> None:
        self._watch = watch
        self._lock = threading.Lock()
        self._flight: _Flight | None = None
        self._closed: str | None = None  # the caller is gone: why (what it raised)
        # Until when the waiting caller sleeps: a call due sooner must wake it. Before the
        # caller first looks it is not asleep, and when it looks it sees the call in flight
        # (under the lock): no call made before that wakes it. Woken then, it would first
        # have to take the GIL from the loop, which holds it for the whole run, so every
        # call until it did wrote a wake-up of its own (up to one a step).
        self._sleeping_until = -math.inf
        # The deadline of the last call begun: the caller sleeps until it even once that
        # call has ended (`_wait`), so that the next call, due later, need not wake it.
        # Before the first call, the deadline a call begun now would have (`timeout`: the
        # run's model_timeout), so that the first call, begun later, need not wake it either.
        self._timeout = timeout
        self._last_deadline = math.inf
        self._wake: Any = None  # the waiting caller's signal

    def run(self, first: Callable[[], T], again: Callable[[Overrun[Any]], T]) -> T:
        """`first()` on a spare thread, its result (or exception) here; after an abandoned
        call, `again(overrun)` on another, and so on until one of them ends."""
        if self._timeout is not None:
            self._last_deadline = time.monotonic() + max(self._timeout, 0.0)
        job = calls.SpareCall(first)
        try:
            while True:
                overrun = self._watched_wait(job)
                if overrun is None:
                    outcome: T = job.outcome()
                    return outcome
                job = calls.SpareCall(functools.partial(again, overrun))
        except BaseException as exc:
            why = reason(exc)
            with self._lock:  # the caller is gone: the loop stops at its next call
                self._closed = why
                flight, self._flight = self._flight, None
                if flight is not None:
                    flight.abandoned = True
            if flight is not None:
                flight.carried.given_up(why)
            raise

    def _watched_wait(self, job: calls.SpareCall) -> Overrun[Any] | None:
        """`_wait`, with the watcher thread asking the watch and waking this thread for it."""
        with self._lock:
            self._wake = job.wake  # where a call due sooner than the caller's sleep wakes it
        if self._watch is None:
            return self._wait(job)
        key = watching.watcher().add(self._watched, job.wake)
        try:
            return self._wait(job)
        finally:
            watching.watcher().remove(key)

    def call(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        timeout: float | None,
        step: int,
        carried: Carried,
    ) -> Any:
        """`fn(*args)` on this (the loop's) thread, given up by the waiting caller once
        `timeout` passes or the watch names a reason (then this raises Abandoned, once `fn`
        returns, and the run goes on from `step` elsewhere with `carried`). Whenever this
        raises Abandoned, `carried` is told `given_up`, once, by whoever gave the call up."""
        flight = _Flight(step, timeout, carried)
        with self._lock:
            closed = self._closed
            if closed is None:
                self._flight = flight
                self._last_deadline = flight.deadline
                wake = self._wake if flight.deadline < self._sleeping_until else None
        if closed is not None:  # given up before it began: told here
            carried.given_up(closed)
            raise Abandoned
        if wake is not None:  # about once a model_timeout: the caller sleeps past its end
            wake.set()
        try:
            result = fn(*args)
        finally:
            with self._lock:
                if flight.abandoned:
                    raise Abandoned from None
                self._flight = None
        if type(result) in calls.PLAIN:
            return result
        return calls.awaited(result, flight.deadline - time.monotonic(), self._watch)

    def _watched(self) -> str | None:
        """The watch, asked by the watcher thread: only while a call is in flight (between
        calls the loop checks for itself, before its next)."""
        if self._flight is None or self._watch is None:
            return None
        return self._watch()

    def _wait(self, job: calls.SpareCall) -> Overrun[Any] | None:
        """Wait until the job ends (None) or its call in flight is abandoned (why)."""
        while True:
            with self._lock:
                flight = self._flight
                if flight is not None:
                    until = flight.deadline
                elif self._last_deadline > time.monotonic():
                    # Between two calls (a quick model's usual state when this thread looks):
                    # sleeping until the last call's deadline rather than for ever, the next
                    # call (due later, on the same model_timeout) needs no wake-up, which
                    # would be a cross-processor one twice a step on a quiet machine. Woken
                    # then, it looks again: about once a model_timeout, never past a deadline.
                    until = self._last_deadline
                else:
                    until = math.inf
                self._sleeping_until = until
            if job.ended:
                return None
            left = None if until == math.inf else max(until - time.monotonic(), 0.0)
            job.wake.wait(left)
            if job.ended:
                return None
            overrun = self._abandon()
            if overrun is not None:
                return overrun

    def _abandon(self) -> Overrun[Any] | None:
        """Give up the call in flight if it overran or its watch names a reason."""
        flight = self._flight
        if flight is None:
            return None
        error: Exception | None = None
        if time.monotonic() >= flight.deadline:
            error = CallTimedOut(f"no result after {flight.timeout:g}s")
        elif self._watch is not None:
            try:
                why = self._watch()  # outside the lock: it is user code
            except Exception as exc:  # raised for the call, as a watch's failure always was
                error = exc
            else:
                if why is not None:
                    error = CallInterrupted(why)
        if error is None:
            return None
        with self._lock:
            if self._flight is not flight:
                return None  # it ended meanwhile: the loop went on with its result
            flight.abandoned = True
            self._flight = None
        flight.carried.given_up(reason(error))
        return Overrun(flight.step, error, flight.carried)
