"""Answers to waiting runs, and what they wait for: the SQL of people in the loop.

A waiting run's journal ends with its step's `wait` entries, one per call that needs an
answer (written with the move to `waiting`, see `runner.fencing`), then the answers given so
far. An answer is ONE transaction on the locked run row: it appends the `answer` entry of
one waiting call, only while the run still waits for that call (status `waiting`, the same
lease epoch, no answer to that call yet); the answer to the step's last open call also
queues the run again. Two answers racing (two approvers, approve against deny, an answer
against a cancel) are serialised by the row lock (BEGIN IMMEDIATE on SQLite, FOR UPDATE on
PostgreSQL): the first wins, the others find the call answered (or the run no longer
waiting) and are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.faults import fault
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.waiting import Answer, Answered, Wait, timed_out_reason
from runner.errors import NotWaiting, RunNotFound
from runner.sql import reads
from runner.sql import run_states as listing
from runner.sql.backend import backend_for
from runner.sql.payloads import payloads_of
from runner.sql.runs import RunRow, entry_of, lock_run, plain, plain_reading
from runner.sql.schema import entries, runs
from runner.store.rows import entry_row
from runner.store.rules import (
    answer_entry,
    answer_words,
    check_answer,
    check_fits,
    chosen_wait,
    unanswered,
    wait_of,
    why_not_waiting,
)


@dataclass(frozen=True)
class _Open:
    """A waiting run's open waits (the calls not answered yet, in call order) and the seq of
    its journal's last entry (the next answer goes right after it)."""

    waits: list[tuple[Entry, datetime]]
    last_seq: int


def open_waits(connection: Connection, run_id: str) -> _Open | None:
    """The run's open waits; None if its journal does not end in waits still open
    (`runner.sql.children` delivers a child's end to them too)."""
    with plain(connection) as reader:
        tail = reads.wait_rows(reader, run_id)
    waits = unanswered(tail)
    return _Open(waits, tail[-1][1]) if waits else None


# -- reading --------------------------------------------------------------------------------


def pending(engine: Engine, runs_: Sequence[RunRow]) -> dict[str, list[Wait]]:
    """Every call each of these runs waits for (the waiting ones: the others are left out)."""
    if not any(run.status is RunStatus.WAITING for run in runs_):
        return {}
    with plain_reading(engine) as reader:
        return listing.waits(reader, runs_)


# -- answering ------------------------------------------------------------------------------


def answer(
    engine: Engine,
    run_id: str,
    given: Answer,
    *,
    text: str | None,
    by: str,
    call: str | None = None,
    clock: Clock = SYSTEM,
) -> Answered:
    """Record a person's answer to one call the run waits for; the last one queues the run.

    `call` names the call (its idempotency key); it may be left out while the run waits for
    one call only. NotWaiting when the run waits for nothing (any more) or the call was
    answered already, WrongAnswer when the run waits for another kind of answer or other
    calls; nothing is written then.
    """
    check_answer(given, text, by)
    at = utc_now(clock)
    try:
        with engine.begin() as connection:
            row = lock_run(connection, run_id)
            if row is None:
                raise RunNotFound(f"no run with id {run_id}")
            run = RunRow.of(row)
            found = open_waits(connection, run.id) if run.status is RunStatus.WAITING else None
            if found is None:
                raise NotWaiting(_why_not_waiting(connection, run, call))
            waits = [wait_of(run, entry, when) for entry, when in found.waits]
            wait = chosen_wait(run, waits, call, lambda: _answer_to(connection, run, call))
            check_fits(run, wait, given)
            expired = wait.expires_at is not None and wait.expires_at <= at
            still: tuple[str, ...] = ()
            if expired:  # too late: the timeout is the answer, as a claim would record it
                time_out(connection, run, at)
            else:
                entry = found.waits[waits.index(wait)][0]
                _record(connection, run, entry, found.last_seq + 1, given, text, by, at)
                still = tuple(other.call for other in waits if other is not wait)
                if not still:
                    _requeue(connection, run, at)
    except IntegrityError:
        # Another answer took the seq after the last entry first (the row lock should have
        # made this one wait for it and see it): the same refusal, whichever way it lost.
        raise NotWaiting(f"run {run_id} was answered by someone else meanwhile") from None
    if expired:
        raise NotWaiting(
            f"run {run.id} waited too long: call {wait.call} was denied at {at:%H:%M:%S} UTC, "
            f"{timed_out_reason(float(run.budgets.get('approval_timeout') or 0))}"
        )
    # The answer is durable: a crash from here on leaves a queued run to resume (or, while
    # other calls of its step wait, a run still waiting for them).
    fault("after_answer_commit")
    return Answered(run.id, wait.call, given, by, at, text, still_waiting=still)


def time_out(connection: Connection, run: RunRow, at: datetime) -> None:
    """Deny every call `run` (row locked by the caller) still waits for, approval_timeout
    passed, and queue it.

    Called in a claim's transaction, so the timeout holds with no process running the run.
    """
    found = open_waits(connection, run.id)
    if found is not None:  # (waiting with no open wait cannot be written; requeue it anyway)
        seconds = float(run.budgets.get("approval_timeout") or 0)
        reason = timed_out_reason(seconds)
        for n, (entry, _) in enumerate(found.waits, 1):
            _record(connection, run, entry, found.last_seq + n, Answer.TIMED_OUT, reason, None, at)
    _requeue(connection, run, at)


def _record(
    connection: Connection,
    run: RunRow,
    wait: Entry,
    seq: int,
    given: Answer,
    text: str | None,
    by: str | None,
    at: datetime,
) -> None:
    entry = answer_entry(wait, given, text, by)
    # Written under the wait's epoch: no claim has been made since the run began to wait.
    connection.execute(
        insert(entries).values(
            entry_row(run.id, seq, run.lease_epoch, entry, at, payloads_of(connection))
        )
    )


def _requeue(connection: Connection, run: RunRow, at: datetime) -> None:
    """Queue the answered run; its deadline moves by the time it waited (max_seconds is
    active time). Conditional: only while it still waits, under the epoch it waited with."""
    deadline = run.deadline
    if deadline is not None and run.waiting_since is not None:
        deadline += max(at - run.waiting_since, timedelta(0))
    result = connection.execute(
        update(runs)
        .where(
            runs.c.id == run.id,
            runs.c.status == RunStatus.WAITING,
            runs.c.lease_epoch == run.lease_epoch,
        )
        .values(
            status=RunStatus.QUEUED,
            waiting_since=None,
            wait_expires_at=None,
            deadline=deadline,
            updated_at=at,
        )
    )
    if result.rowcount != 1:
        raise NotWaiting(f"run {run.id} stopped waiting meanwhile")
    backend_for(connection.dialect.name).wake_workers(connection)


def _answer_to(connection: Connection, run: RunRow, call: str | None) -> str:
    """Who last answered the run (the call `call`, if given) and when, in words; "" if none."""
    query = select(entries).where(entries.c.run_id == run.id, entries.c.kind == EntryKind.ANSWER)
    if call is not None:
        query = query.where(entries.c.idempotency_key == call)
    last = connection.execute(query.order_by(entries.c.seq.desc()).limit(1)).first()
    return "" if last is None else answer_words(entry_of(last), last.created_at)


def _why_not_waiting(connection: Connection, run: RunRow, call: str | None) -> str:
    return why_not_waiting(run, _answer_to(connection, run, call))
