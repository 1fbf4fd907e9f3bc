"""The model call: what the model is sent, its retries with backoff, the checks before it
(pause, cancel, deadline), and the wrap-up's last call, all under the run's deadline. Each
call reserves from the run's provider limit first and settles after (`runner.core.limits`)."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.core.actions import Action, ActionKind, parse_action
from runner.core.backoff import Backoff
from runner.core.budgets import Budgets
from runner.core.calls import CallTimedOut, described, invoke
from runner.core.clock import Clock
from runner.core.context import Context
from runner.core.deltas import DeltaSink, DeltaStream, streaming
from runner.core.faults import fault
from runner.core.interrupts import CallInterrupted, checking
from runner.core.journal import Entry, Journal
from runner.core.limits import (
    Draw,
    Reservation,
    characters_added,
    estimate_tokens,
    max_tokens_of,
)
from runner.core.loop_host import Abandoned, LoopHost, Overrun
from runner.core.spans import ModelCall as ModelCallSpan
from runner.core.spans import Spans
from runner.core.stop_reasons import StopReason
from runner.errors import ModelFatal, ModelRetryable, RunParked, RunPaused

Model = Callable[[list[dict[str, Any]]], Any]
Cancel = Callable[[], bool] | threading.Event

# A wrap-up call gets this long when the clock itself is what ran out.
WRAP_UP_SECONDS = 30.0


class ModelFailed(Exception):
    """The model kept failing (or its context function failed): the run stops for it."""


class OutOfTime(Exception):
    """The deadline came before the model answered."""


class ModelTimedOut(Exception):
    """One model call took longer than the run's model_timeout: retried like any failure."""


class CancelledInFlight(Exception):
    """The run was cancelled while its model call was in flight, and the call gave up."""


@dataclass
class _Attempt:
    """What an attempt made on a loop's own thread leaves for the thread that goes on after
    it is abandoned (runner.core.loop_host)."""

    attempt: int
    backoff: Backoff
    reservation: Reservation | None
    run_ends_first: bool
    own: float | None
    stream: DeltaStream | None
    span: ModelCallSpan

    def given_up(self, why: str) -> None:
        """Its call was abandoned: its span ends now (not when its thread returns), and no
        piece it still reads reaches a follower."""
        self.span.given_up(why)
        if self.stream is not None:
            self.stream.end()


class ModelCall:
    """One run's way to the model: asked with retries, never past the deadline."""

    def __init__(
        self,
        model: Model,
        journal: Journal,
        *,
        deadline: float | None,
        cancel: Cancel | None,
        pause: threading.Event | None,
        clock: Clock,
        context: Context | None,
        spans: Spans,
        deltas: DeltaSink | None = None,
        draw: Draw | None = None,
    ) -> None:
        self.model = model
        self.draw = draw  # the provider limit its calls draw from, if any
        self.journal = journal
        self.deadline = deadline
        self.cancel = cancel
        self.pause = pause
        self.clock = clock
        self.context = context
        self.spans = spans
        self.deltas = deltas  # where a streaming model's pieces go (None: nowhere)
        # The tree hold of the last call `ask` made, left for the entry that records its
        # output to end (`release_tree` ends it sooner, for an entry at a step not its own).
        self.held: object | None = None
        # The transcript's length at the last call `ask` made, and the length of the JSON of
        # the prompt it sent (for the next call's reservation made ahead: `expect`).
        self._asked: int | None = None
        self._sent: int | None = None
        # Set by `drive` when the loop runs on a thread of its own (runner.core.loop_host):
        # the model is then called inline, and `at` is the loop's step it is called in.
        self.host: LoopHost | None = None
        self.at = 0
        # A call abandoned on another thread, whose attempts this thread goes on with.
        self.resumed: Overrun[_Attempt] | None = None

    def check(self, steps: int) -> StopReason | None:
        """Why the run must stop before asking the model for step `steps + 1`, if it must.

        A pause raises RunPaused: the run is left unfinished for a later resume."""
        if self.pause is not None and self.pause.is_set():
            raise RunPaused(f"run {self.journal.run_id} paused before step {steps + 1}")
        if self.cancelled():
            return StopReason.CANCELLED
        if self.deadline is not None and self.clock.time() >= self.deadline:
            return StopReason.TIME_BUDGET
        return None

    def watchable(self) -> bool:
        """Whether `stop_requested` can ever name a reason (a cancel, a pause, a journal
        somebody else can cancel)."""
        return (
            self.cancel is not None
            or self.pause is not None
            or getattr(self.journal, "cancellable", True)
        )

    def stop_requested(self) -> str | None:
        """Why a model call in flight should give up (runner.core.interrupts)."""
        if self.pause is not None and self.pause.is_set():
            return "paused"
        return "cancelled" if self.cancelled() else None

    def cancelled(self) -> bool:
        if isinstance(self.cancel, threading.Event):
            if self.cancel.is_set():
                return True
        elif self.cancel is not None and self.cancel():
            return True
        return self.journal.cancel_requested()

    def ask(
        self,
        transcript: list[dict[str, Any]],
        budgets: Budgets,
        step: int,
        failed: Exception | None = None,
    ) -> Any:
        """Call the model, retrying exceptions with backoff; never past the deadline.
        `failed`: the first attempt was made elsewhere and raised this (it is retried).

        A child run's call holds its estimate against its tree's budgets first (TreeStopped
        if they are spent, RunParked if calls in flight hold them): the hold ends with the
        entry that records the output, or here if no output comes."""
        try:
            shown = self.shown(transcript)
        except Exception as exc:  # the same transcript would fail the same way again
            raise ModelFailed(f"context: {described(exc)}") from None
        self._asked, self._sent = len(transcript), None
        hold = self.held = self.hold_tree(shown, step)
        try:
            return self.attempts(shown, budgets, step, failed)
        except BaseException:
            self.release_tree(hold)
            raise

    def attempts(
        self,
        shown: list[dict[str, Any]],
        budgets: Budgets,
        step: int,
        failed: Exception | None = None,
    ) -> Any:
        """The model's output for `shown`, retrying exceptions with backoff. After a call
        abandoned on another thread (`resumed`), the attempts go on from that one's end."""
        last: Exception | None = failed
        backoff = Backoff(budgets.retry_backoff)
        first = 1 if failed else 0
        resumed, self.resumed = self.resumed, None
        if resumed is not None:
            backoff, first = resumed.carried.backoff, resumed.carried.attempt
        for attempt in range(first, budgets.model_retries + 1):
            if resumed is not None:
                made = resumed.carried  # this attempt was made: only its end is left
                reservation, run_ends_first, own = made.reservation, made.run_ends_first, made.own
            else:
                if attempt:
                    pause = backoff.next()
                    if isinstance(last, ModelRetryable) and last.retry_after is not None:
                        pause = max(pause, last.retry_after)  # the provider said when
                    remaining = self.remaining()
                    if remaining is not None and remaining <= pause:
                        raise OutOfTime
                    self.clock.sleep(pause)
                remaining = self.remaining()
                if remaining is not None and remaining <= 0:
                    raise OutOfTime
                own = budgets.model_timeout
                run_ends_first = own is None or (remaining is not None and remaining <= own)
                # Outside the try: a run parked for its limit (RunParked) is no model failure.
                reservation = self.reserve(shown)
            output = None
            settled_here = True
            try:
                if resumed is not None:
                    error, resumed = resumed.error, None
                    raise error  # what the abandoned call raised for its caller
                with (
                    self.spans.model_call(step) as call,
                    checking(self.stop_requested),
                    streaming(self.deltas, step) as stream,
                ):
                    if reservation is not None:
                        call.limited(reservation.limit, reservation.waited)
                    timeout = remaining if run_ends_first else own
                    if self.host is not None:
                        made = _Attempt(
                            attempt, backoff, reservation, run_ends_first, own, stream, call
                        )
                        output = self.host.call(self.model, (shown,), timeout, self.at, made)
                    else:
                        output = invoke(
                            self.model, (shown,), {}, timeout, watch=self.stop_requested
                        )
                    call.returned(output)
                return output
            except Abandoned:
                settled_here = False  # given up: the thread going on settles it
                raise
            except CallTimedOut:
                if run_ends_first:
                    raise OutOfTime from None
                last = ModelTimedOut(
                    f"model call took longer than its model_timeout, {own:g} s: given up"
                )
            except CallInterrupted as exc:
                if exc.reason == "paused":
                    raise RunPaused(
                        f"run {self.journal.run_id} paused during its model call"
                    ) from None
                raise CancelledInFlight from None
            except ModelFatal as exc:
                raise ModelFailed(described(exc)) from None
            except Exception as exc:
                last = exc
                if self.draw is not None:
                    self.draw.failed(exc)  # a 429's Retry-After holds every run back
            finally:
                if settled_here:
                    self.settle(reservation, output)
        raise ModelFailed(described(last))

    def hold_tree(self, shown: list[dict[str, Any]], step: int) -> object | None:
        """Hold the call's estimate against the budgets of the runs above (a durable child
        run's journal does; any other holds nothing)."""
        hold = getattr(self.journal, "hold_tree", None)
        if hold is None:
            return None
        max_tokens = self.draw.max_tokens if self.draw is not None else max_tokens_of(self.model)
        held: object | None = hold(step, lambda: estimate_tokens(shown, max_tokens))
        if held is not None:
            fault("after_tree_hold")
        return held

    def release_tree(self, hold: object | None) -> None:
        release = getattr(self.journal, "release_tree", None)
        if hold is None or release is None:
            return
        # Left counting if this fails: the run's next hold, or its end, drops it.
        with contextlib.suppress(Exception):
            release(hold)

    def expect(self, transcript: list[dict[str, Any]], entry: Entry) -> None:
        """The journal's next write records `entry`, and the next model call follows it at
        once, sent `transcript` with the entry's message: its reservation may be made in
        that write (`Draw.ahead`), reckoned from the last call's prompt and what the
        transcript gained since (exact with no context function; a context's prompt is
        taken to grow as the transcript does, and a call it does not cover reserves alone)."""
        asked, sent = self._asked, self._sent
        if self.draw is None or (asked is not None and sent is None):
            return
        if asked is None and (self.context is not None or transcript):
            return  # the first call this process makes of a run under way: not known

        def characters() -> int:  # made only if the store wants the reservation
            message = entry.message()
            added = [] if message is None else [message]
            if asked is None:
                return characters_added(added)
            assert sent is not None
            return sent + characters_added([*transcript[asked:], *added])

        self.draw.ahead(characters)

    def reserve(self, shown: list[dict[str, Any]]) -> Reservation | None:
        if self.draw is None:
            return None
        self.draw.characters = None  # made anew if the limit is set
        reservation = self.draw.reserve(shown)
        self._sent = self.draw.characters
        return reservation

    def settle(self, reservation: Reservation | None, output: Any) -> None:
        if reservation is not None and self.draw is not None:
            self.draw.settle(reservation, output)

    def last_action(
        self, transcript: list[dict[str, Any]], budgets: Budgets, reason: StopReason, step: int
    ) -> Action:
        """The wrap-up's one call, no retries: the model's action, or an invalid one if it
        failed (the run is over either way, and keeps the budget's reason)."""
        reservation = None
        output = None
        try:
            limit = WRAP_UP_SECONDS if reason is StopReason.TIME_BUDGET else self.remaining()
            if limit is not None and limit <= 0:
                limit = WRAP_UP_SECONDS
            if budgets.model_timeout is not None:
                limit = min(limit if limit is not None else math.inf, budgets.model_timeout)
            shown = self.shown(transcript)
            reservation = self.reserve(shown)
            with (
                self.spans.model_call(step) as call,
                checking(self.stop_requested),
                streaming(self.deltas, step),
            ):
                output = invoke(self.model, (shown,), {}, limit, watch=self.stop_requested)
                call.returned(output)
            return parse_action(output)
        except RunParked:
            raise  # the run waits for its limit: the wrap-up is asked when it comes back
        except CallInterrupted as exc:
            if exc.reason == "paused":  # the note is journaled: a resume asks again
                raise RunPaused(f"run {self.journal.run_id} paused during its wrap-up") from None
            return Action(ActionKind.INVALID, error=described(exc))
        except Exception as exc:
            return Action(ActionKind.INVALID, error=described(exc))
        finally:
            self.settle(reservation, output)

    def shown(self, transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the model is sent: the transcript, through the agent's context function."""
        return transcript if self.context is None else self.context(transcript)

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: the run has none)."""
        return None if self.deadline is None else self.deadline - self.clock.time()
