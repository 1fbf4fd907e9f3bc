"""What `runner list` and `runner show` show, over runner.reads: the runs in a state, as
they stand now (the counters of an unfinished run's journal, stalled or not), what the
waiting ones wait for, and a run's result so far.

`Runner.list`, `row`, `waits` and `get` use these over their engine. `listed` and `shown`
(the commands') use them over a connection opened without SQLAlchemy (runner.direct) where
one opens, else through a Runner: one implementation of each read, whichever way the
database was opened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from runner import direct, liveness, reads
from runner.budgets import StopReason
from runner.clock import SYSTEM, utc_now
from runner.journal import Counters, Entry, EntryKind, transcript_of
from runner.owner import local_prefix
from runner.reads import Reader
from runner.result import AgentResult
from runner.rows import RunRow
from runner.status import STALLED, RunStatus
from runner.waiting import Asks, Wait

# How many live leases held on this host a listing of running or stalled runs looks
# through for dead holders.
LOCAL_SCAN = 200

T = TypeVar("T")


@dataclass(frozen=True)
class Listed:
    """What `runner list` shows: the runs, the time they were judged at, their waits."""

    rows: Sequence[RunRow]
    now: datetime
    waits: dict[str, Wait]


@dataclass(frozen=True)
class Shown:
    """What `runner show` shows: the run's result so far, its row, its journal, and when."""

    result: AgentResult
    row: RunRow
    journal: list[Entry]
    now: datetime


def listed(
    url: str | None,
    *,
    state: str | None = None,
    stop_reason: StopReason | None = None,
    release: str | None = None,
    limit: int = 20,
) -> Listed:
    """The runs `runner list` shows (see `runs`) of the database at `url`."""

    def plainly(reader: Reader) -> Listed:
        now = clock_now(reader)
        rows = runs(reader, now, state=state, stop_reason=stop_reason, release=release, limit=limit)
        return Listed(rows, now, waits(reader, rows))

    found = _plainly(url, plainly)
    if found is not None:
        return found
    from runner.durable import Runner

    with Runner(url) as runner:
        rows = runner.list(state=state, stop_reason=stop_reason, release=release, limit=limit)
        return Listed(rows, runner.now(), runner.waits(rows))


def shown(url: str | None, run_id: str) -> Shown:
    """What `runner show` shows of the run `run_id` (or the one whose id starts so)."""

    def plainly(reader: Reader) -> Shown:
        now = clock_now(reader)
        run = reads.find_run(reader, run_id)
        journal = [entry for entry, _ in reads.load_entries(reader, run.id)]
        result = result_of(run, journal, waits(reader, [run]).get(run.id))
        return Shown(result, observe(reader, [run], now)[0], journal, now)

    found = _plainly(url, plainly)
    if found is not None:
        return found
    from runner.durable import Runner

    with Runner(url) as runner:
        row = runner.row(run_id)
        return Shown(runner.get(row.id), row, runner.journal(row.id), runner.now())


def _plainly(url: str | None, read: Callable[[Reader], T]) -> T | None:
    """`read` on a plain connection (runner.direct); None where none opens, or on a driver
    error: only reads were made, so the full path reads again, and words the error as every
    command does (runner's own errors, a run not found, pass through as they are)."""
    reader = direct.open_reader(url)
    if reader is None:
        return None
    try:
        return read(reader)
    except reader.errors:
        return None
    finally:
        reader.close()


def clock_now(reader: Reader) -> datetime:
    """Now on the clock leases are measured on: the server's on PostgreSQL (as the
    Runner's DatabaseClock reads it), this machine's for an SQLite file (every process that
    uses the file runs here)."""
    return utc_now(SYSTEM) if reader.sqlite else reads.database_now(reader)


def runs(
    reader: Reader,
    now: datetime,
    *,
    status: RunStatus | None = None,
    stop_reason: str | None = None,
    release: str | None = None,
    limit: int = 20,
    state: str | None = None,
) -> list[RunRow]:
    """Runs, newest first, as they stand at `now` (see `observe`). `state` filters by state:
    `running` leaves out the stalled runs that `status=running` includes."""
    if state is None or state not in (RunStatus.RUNNING, STALLED):
        chosen = RunStatus(state) if state is not None else status
        rows = reads.list_runs(
            reader, status=chosen, stop_reason=stop_reason, release=release, limit=limit
        )
        return observe(reader, rows, now)
    filters: dict[str, Any] = {"stop_reason": stop_reason, "release": release}
    running = RunStatus.RUNNING
    # A live lease on this host may be a dead process's: those are read and judged here.
    here = reads.list_runs(
        reader, status=running, lease_live_at=now, owner_prefix=local_prefix(),
        limit=limit + LOCAL_SCAN, **filters,
    )  # fmt: skip
    if state == STALLED:
        expired = reads.list_runs(
            reader, status=running, lease_expired_at=now, limit=limit, **filters
        )
        found = [*expired, *(row for row in here if liveness.is_stalled(row, now))]
    else:
        live = reads.list_runs(
            reader, status=running, lease_live_at=now, limit=limit + len(here), **filters
        )
        found = [row for row in live if not liveness.is_stalled(row, now)]
    found.sort(key=lambda row: (row.created_at, row.id), reverse=True)
    return observe(reader, found[:limit], now)


def observe(reader: Reader, rows: Sequence[RunRow], now: datetime) -> list[RunRow]:
    """The rows with their state at `now` and, for unfinished runs, their journal's counters."""
    unfinished = [row.id for row in rows if row.status is not RunStatus.FINISHED]
    last = reads.last_entries(reader, unfinished) if unfinished else {}
    return [
        liveness.observed(row, now, last[row.id][0] if row.id in last else None) for row in rows
    ]


def waits(reader: Reader, rows: Sequence[RunRow]) -> dict[str, Wait]:
    """What each of these runs waits for (the waiting ones: the others are left out)."""
    found: dict[str, Wait] = {}
    for run in rows:
        if run.status is not RunStatus.WAITING:
            continue
        last = reads.last_entry(reader, run.id)  # one primary-key probe each
        if last is not None and last[0].kind is EntryKind.WAIT:
            entry, _seq, at = last
            found[run.id] = wait_of(run, entry, at)
    return found


def wait_of(run: RunRow, entry: Entry, at: datetime) -> Wait:
    """The wait that `entry` (the run's last, a wait written at `at`) opened."""
    assert entry.tool is not None and entry.idempotency_key is not None
    return Wait(
        run_id=run.id,
        step=entry.step,
        call=entry.idempotency_key,
        tool=entry.tool,
        args=dict(entry.args or {}),
        asks=Asks(str(entry.waits_for)),
        question=str(entry.content),
        since=run.waiting_since or at,
        expires_at=run.wait_expires_at,
    )


def result_of(run: RunRow, journal: Sequence[Entry], waiting: Wait | None) -> AgentResult:
    """The run's result so far (stop_reason None while it has not stopped), from its row,
    its journal and what it waits for."""
    transcript = transcript_of(list(journal))
    # A finished run stores its final counters; an unfinished one has them in its journal.
    counters = Counters(run.steps, run.tokens, run.cost)
    if run.status is not RunStatus.FINISHED and journal:
        counters = journal[-1].counters
    return AgentResult(
        stop_reason=run.stop_reason,
        output=run.output,
        steps=counters.steps,
        transcript=transcript,
        tokens=counters.tokens,
        cost=counters.cost,
        error=run.error,
        wrapped_up=run.wrapped_up,
        run_id=run.id,
        status=run.status,
        waiting=waiting,
    )
