"""What a foreign run (runner.core.foreign) holds and how it writes: the journal's entries
indexed by step (`StepRows`), the state both sides of the run share (`ForeignRecord`: the stop
rules and counters, the current step, what is kept for the next write), and the writes
themselves.

A framework may call its tools at once, so each write goes under one lock. Entries kept for
the run's next write (its task; a step's calls, until the first of them runs) are committed in
that write, before its own rows; a write of another shape (a wait, the run's end, messages)
flushes them alone first. A framework that asks for what the journal does not hold here has
diverged: the run stops with `diverged` (`_diverged`), never takes another path.

The model-request side (runner.core.foreign_requests) and the tool-call side
(runner.core.foreign_calls) are mixins over this class; runner.core.foreign joins them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from runner.core.budgets import Budgets
from runner.core.clock import SYSTEM, Clock
from runner.core.counters import Counters
from runner.core.deltas import DeltaSink
from runner.core.foreign_values import Reply, Stopped
from runner.core.journal import Entry, EntryKind, Journal, Stop
from runner.core.limits import NO_LIMITS, Draw, Limits, limit_wait_entry
from runner.core.model_call import Cancel, ModelCall
from runner.core.spans import NO_SPANS, Spans
from runner.core.steps import observation_entry
from runner.core.stop_reasons import StopReason
from runner.core.stop_rules import StopRules
from runner.core.tools import Tool
from runner.core.tree import Place
from runner.errors import ReplayMismatch


@dataclass
class StepRows:
    """The rows of one step, recorded or written by this process."""

    actions: list[Entry] = field(default_factory=list)  # tool calls (or one invalid/final)
    outcomes: dict[str, Entry] = field(default_factory=dict)  # by call key
    waits: dict[str, Entry] = field(default_factory=dict)
    answers: dict[str, Entry] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    messages: list[Entry] = field(default_factory=list)  # sent to the run (`runner send`)
    response: Entry | None = None  # the framework's own JSON of the step's response, if kept
    recorded: bool = False  # its action came from the journal (a previous process)

    def call(self, call_id: str) -> Entry | None:
        for entry in self.actions:
            if entry.call_id == call_id and entry.kind is EntryKind.ACTION:
                return entry
        return None


class ForeignRecord:
    """The state of one journaled run of a framework's loop, and its writes: the base of
    `ForeignRun`'s two sides."""

    def __init__(
        self,
        tools: Mapping[str, Tool],
        task: str,
        budgets: Budgets,
        journal: Journal,
        *,
        deadline: float | None = None,
        cancel: Cancel | None = None,
        pause: threading.Event | None = None,
        clock: Clock = SYSTEM,
        spans: Spans = NO_SPANS,
        limit: str | None = None,
        limits: Limits = NO_LIMITS,
        deltas: DeltaSink | None = None,
    ) -> None:
        self.tools = tools  # each tool's declaration (idempotent, reconcile, ...), by name
        self.task = task
        self.journal = journal
        self.rules = StopRules(budgets)
        self.spans = spans
        self.writing = threading.Lock()
        self.entries: list[Entry] = []  # every entry of the run, recorded then written
        # Entries kept for the run's next write (its task; a step's calls, until the first
        # of them runs): committed in its commit, before its own rows.
        self.unwritten: list[Entry] = []
        self.steps: dict[int, StepRows] = {}
        self.step = 0  # the step of the framework's last model request
        self.pending_reply: tuple[int, Reply] | None = None  # a reply with no call, unjudged
        draw = None
        if limit is not None:
            draw = Draw(limits, limit, None, waited=self._limit_waited)
        self.model_call = ModelCall(
            _no_model,
            journal,
            deadline=deadline,
            cancel=cancel,
            pause=pause,
            clock=clock,
            context=None,
            spans=spans,
            deltas=deltas,
            draw=draw,
        )
        self.task_recorded = False
        self.listings: Entry | None = None  # the tool listings the run started with
        self.listings_checked = False
        self.last_recorded = 0  # the last step the journal holds an action of
        self._index(journal.recorded())
        self.place = journal.place() if hasattr(journal, "place") else Place()

    # -- what the journal holds -------------------------------------------------------------

    def _index(self, recorded: Sequence[Entry]) -> None:
        for entry in recorded:
            self.entries.append(entry)
            if entry.kind is EntryKind.TASK:
                self.task_recorded = True
                continue
            if entry.kind is EntryKind.TOOLS:
                self.listings = entry
                continue
            step = self.steps.setdefault(entry.step, StepRows(recorded=True))
            key = entry.idempotency_key or ""
            if entry.kind in (EntryKind.ACTION, EntryKind.FINAL, EntryKind.REFUSED):
                step.actions.append(entry)
                self.last_recorded = max(self.last_recorded, entry.step)
            elif entry.kind is EntryKind.OBSERVATION:
                step.outcomes[key] = entry
            elif entry.kind is EntryKind.WAIT:
                step.waits[key] = entry
            elif entry.kind is EntryKind.ANSWER:
                step.answers[key] = entry
            elif entry.kind is EntryKind.START:
                step.started.add(key)
            elif entry.kind is EntryKind.MESSAGE:
                step.messages.append(entry)
            elif entry.kind is EntryKind.RESPONSE:
                step.response = entry

    # -- writing ----------------------------------------------------------------------------

    def _write_outcome(
        self, step: StepRows, call: Entry, content: str, is_error: bool, attempt: int
    ) -> Entry:
        with self.writing:
            key = call.idempotency_key or ""
            c = self.rules.counters
            before = call.counters.error_streak
            # A step is a failed step only if every one of its calls failed.
            failed = is_error and all(e.is_error for e in step.outcomes.values())
            streak = before + 1 if failed else 0
            counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
            entry = observation_entry(call, counters, content, is_error, attempt)
            self._append(entry)
            step.outcomes[key] = entry
            return entry

    def _append(self, entry: Entry, stop: Stop | None = None) -> None:
        if self.unwritten:
            self._append_many([entry], stop)
            return
        self.journal.append(entry, stop)
        self.entries.append(entry)

    def _append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        kept, self.unwritten = self.unwritten, []
        self.journal.append_many([*kept, *entries], stop)
        self.entries.extend(entries)

    def _flush(self) -> None:
        """Write what was kept for the run's next write, alone: a write of another shape
        (a wait, the run's end, messages) comes next."""
        if self.unwritten:
            kept, self.unwritten = self.unwritten, []
            self.journal.append_many(kept)

    def _finish(self, stop: Stop) -> None:
        self._flush()
        self.journal.finish(stop, self.rules.counters)

    def _stop(self, stop: Stop) -> NoReturn:
        self._finish(stop)
        raise Stopped(stop)

    def _diverged(self, why: str) -> NoReturn:
        """The framework asks for what the journal does not hold here: stop, saying so."""
        stop = Stop(StopReason.DIVERGED, error=f"diverged from the journal: {why}")
        self._finish(stop)
        raise Stopped(stop) from ReplayMismatch(why, step=self.step)

    def _limit_waited(self, reservation: Any) -> None:
        self._append(limit_wait_entry(self.rules.counters, reservation))


def _no_model(_shown: Any) -> Any:
    raise AssertionError("a framework's request is made through ForeignRun.ask")
