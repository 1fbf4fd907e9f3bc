"""Answers to waiting runs, and what they wait for: the SQL of people in the loop.

A waiting run's last journal entry is its `wait` (written with the move to `waiting`, see
`runner.fencing`). An answer is ONE transaction on the locked run row: it inserts the
`answer` entry right after the wait and queues the run again, only while the run still
waits for exactly that call (status `waiting`, the same lease epoch, no entry after the
wait). Two answers racing (two approvers, approve against deny, an answer against a
cancel) are serialised by the row lock (BEGIN IMMEDIATE on SQLite, FOR UPDATE on
PostgreSQL): the first wins, the others find the run no longer waiting and are refused.
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
from runner.core.waiting import Answer, Answered, Asks, Wait, timed_out_reason
from runner.errors import NotWaiting, RunNotFound, WrongAnswer
from runner.store import reads
from runner.store import run_states as listing
from runner.store.backend import backend_for
from runner.store.runs import RunRow, entry_of, entry_row, lock_run, plain, plain_reading
from runner.store.schema import entries, runs

# The width of entries.answered_by.
BY_LIMIT = 200


@dataclass(frozen=True)
class _Open:
    """A run's open wait: its wait entry and where it sits in the journal."""

    entry: Entry
    seq: int
    at: datetime


def _open_wait(connection: Connection, run_id: str) -> _Open | None:
    """The run's last entry if it is a wait (the answer, when it comes, goes right after)."""
    with plain(connection) as reader:
        last = reads.last_entry(reader, run_id)
    if last is None or last[0].kind is not EntryKind.WAIT:
        return None
    return _Open(*last)


def _wait_of(run: RunRow, found: _Open) -> Wait:
    return listing.wait_of(run, found.entry, found.at)


# -- reading --------------------------------------------------------------------------------


def pending(engine: Engine, runs_: Sequence[RunRow]) -> dict[str, Wait]:
    """What each of these runs waits for (the waiting ones: the others are left out)."""
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
    """Record a person's answer to the run's wait and queue the run: exactly once.

    NotWaiting when the run waits for nothing (any more), WrongAnswer when it waits for
    another kind of answer or another call; nothing is written then.
    """
    check_answer(given, text, by)
    at = utc_now(clock)
    try:
        with engine.begin() as connection:
            row = lock_run(connection, run_id)
            if row is None:
                raise RunNotFound(f"no run with id {run_id}")
            run = RunRow.of(row)
            found = _open_wait(connection, run.id) if run.status is RunStatus.WAITING else None
            if found is None:
                raise NotWaiting(_why_not_waiting(connection, run))
            wait = _wait_of(run, found)
            check_fits(run, wait, given, call)
            expired = wait.expires_at is not None and wait.expires_at <= at
            if expired:  # too late: the timeout is the answer, as a claim would record it
                time_out(connection, run, at)
            else:
                _record(connection, run, found, given, text, by, at)
    except IntegrityError:
        # Another answer took the seq after the wait first (the row lock should have made
        # this one wait for it and see it): the same refusal, whichever way it lost.
        raise NotWaiting(f"run {run_id} was answered by someone else meanwhile") from None
    if expired:
        raise NotWaiting(
            f"run {run.id} waited too long: call {wait.call} was denied at {at:%H:%M:%S} UTC, "
            f"{timed_out_reason(float(run.budgets.get('approval_timeout') or 0))}"
        )
    # The answer is durable: a crash from here on leaves a queued run to resume.
    fault("after_answer_commit")
    assert found.entry.idempotency_key is not None
    return Answered(run.id, found.entry.idempotency_key, given, by, at, text)


def check_answer(given: Answer, text: str | None, by: str) -> None:
    """ValueError for an answer no run could take (whatever it waits for)."""
    if given is Answer.TIMED_OUT:
        raise ValueError("a timeout is recorded by the runner, not given as an answer")
    if given in (Answer.DENIED, Answer.REPLIED) and not (text or "").strip():
        what = "a reason" if given is Answer.DENIED else "the reply's text"
        raise ValueError(f"{what} must not be empty")
    if len(by) > BY_LIMIT:
        raise ValueError(f"who answers must be named in at most {BY_LIMIT} characters")


def time_out(connection: Connection, run: RunRow, at: datetime) -> None:
    """Deny the waiting call of `run` (row locked by the caller): approval_timeout passed.

    Called in a claim's transaction, so the timeout holds with no process running the run.
    """
    found = _open_wait(connection, run.id)
    if found is None:  # waiting with no wait entry cannot be written; requeue it anyway
        _requeue(connection, run, at)
        return
    seconds = float(run.budgets.get("approval_timeout") or 0)
    _record(connection, run, found, Answer.TIMED_OUT, timed_out_reason(seconds), None, at)


def _record(
    connection: Connection,
    run: RunRow,
    found: _Open,
    given: Answer,
    text: str | None,
    by: str | None,
    at: datetime,
) -> None:
    wait = found.entry
    entry = Entry(
        EntryKind.ANSWER,
        wait.step,
        wait.counters,
        content=text,
        tool=wait.tool,
        idempotency_key=wait.idempotency_key,
        answer=given,
        answered_by=by,
    )
    # Written under the wait's epoch: no claim has been made since the run began to wait.
    connection.execute(
        insert(entries).values(entry_row(run.id, found.seq + 1, run.lease_epoch, entry, at))
    )
    _requeue(connection, run, at)


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


def check_fits(run: RunRow, wait: Wait, given: Answer, call: str | None) -> None:
    """WrongAnswer unless `given` (for `call`, if named) answers what `run` waits for."""
    if call is not None and call != wait.call:
        raise WrongAnswer(
            f"run {run.id} waits for call {wait.call} ({wait.question}), not for {call}"
        )
    if given is Answer.APPROVED and wait.asks is Asks.REPLY:
        raise WrongAnswer(
            f"run {run.id} waits for a reply to its question, not an approval: "
            f"runner reply {run.id} TEXT (or runner deny {run.id} --reason TEXT)"
        )
    if given is Answer.REPLIED and wait.asks is Asks.APPROVAL:
        raise WrongAnswer(
            f"run {run.id} waits for approval of {wait.question}, not a reply: "
            f"runner approve {run.id} or runner deny {run.id} --reason TEXT"
        )


def _why_not_waiting(connection: Connection, run: RunRow) -> str:
    last = connection.execute(
        select(entries)
        .where(entries.c.run_id == run.id, entries.c.kind == EntryKind.ANSWER)
        .order_by(entries.c.seq.desc())
        .limit(1)
    ).first()
    return why_not_waiting(run, None if last is None else (entry_of(last), last.created_at))


def why_not_waiting(run: RunRow, last: tuple[Entry, datetime] | None) -> str:
    """Why an answer to `run` is refused, given its last answer (and when it was written)."""
    answered = ""
    if last is not None:
        entry, at = last
        by = f" by {entry.answered_by}" if entry.answered_by else ""
        verb = str(entry.answer).replace("_", " ")
        answered = (
            f"call {entry.idempotency_key} was already {verb}{by} at {at:%Y-%m-%d %H:%M:%S} UTC"
        )
    if run.status is RunStatus.FINISHED:
        why = f"run {run.id} is finished ({run.stop_reason}): it waits for no answer"
        return f"{why} ({answered})" if answered else why
    if answered and run.status is not RunStatus.WAITING:
        return f"run {run.id} is not waiting: {answered}"
    return f"run {run.id} is not waiting for an answer (it is {run.status})"
