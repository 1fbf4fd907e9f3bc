"""Runs as they stand, over runner.sql.reads: the runs in a state now (the counters of an
unfinished run's journal, stalled or not), what the waiting ones wait for, and a run's
result so far.

`Runner.list`, `row`, `waits` and `get` use these over their engine; `runner list` and
`runner show` (runner.service.overview) over a connection opened without SQLAlchemy where
one opens, and the page (runner.history) over its read-only engine: one implementation of
each read, judged at one clock (`clock_now`), whichever way the database was opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runner.core.clock import SYSTEM, utc_now
from runner.core.status import STALLED, RunStatus
from runner.core.waiting import Wait
from runner.sql import reads
from runner.sql.reads import Reader
from runner.store import liveness
from runner.store.owner import local_prefix
from runner.store.rows import RunRow
from runner.store.run_trees import TREE_LIMIT, RunTree, tree_of
from runner.store.run_views import unanswered, wait_of

# How many live leases held on this host a listing of running or stalled runs looks
# through for dead holders.
LOCAL_SCAN = 200


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
    schedule: str | None = None,
) -> list[RunRow]:
    """Runs, newest first, as they stand at `now` (see `observe`). `state` filters by state:
    `running` leaves out the stalled runs that `status=running` includes."""
    if state is None or state not in (RunStatus.RUNNING, STALLED):
        chosen = RunStatus(state) if state is not None else status
        rows = reads.list_runs(
            reader, status=chosen, stop_reason=stop_reason, release=release, limit=limit,
            schedule=schedule,
        )  # fmt: skip
        return observe(reader, rows, now)
    filters: dict[str, Any] = {
        "stop_reason": stop_reason, "release": release, "schedule": schedule
    }  # fmt: skip
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


def waits(reader: Reader, rows: Sequence[RunRow]) -> dict[str, list[Wait]]:
    """Every call each of these runs waits for (the waiting ones: the others are left out)."""
    found: dict[str, list[Wait]] = {}
    for run in rows:
        open_ = open_waits(reader, run)
        if open_:
            found[run.id] = open_
    return found


def open_waits(reader: Reader, run: RunRow) -> list[Wait]:
    """The calls `run` waits for, in call order: its step's waits not answered yet."""
    if run.status is not RunStatus.WAITING:
        return []
    tail = reads.wait_rows(reader, run.id)  # a primary-key range read from the end
    return [wait_of(run, entry, at) for entry, at in unanswered(tail)]


def read_tree(reader: Reader, run: RunRow, now: datetime, limit: int = TREE_LIMIT) -> RunTree:
    """The whole tree `run` is in, drawn from its root, each run as it stands at `now`."""
    root_id = run.root_id or run.id
    rows = reads.tree_runs(reader, root_id, limit + 1)
    return tree_of(observe(reader, rows[:limit], now), root_id, cut=len(rows) > limit)
