"""Leases: which worker executes a run, fenced by an epoch that every claim bumps.

A worker claims a run with one atomic UPDATE (under BEGIN IMMEDIATE on SQLite, with
FOR UPDATE SKIP LOCKED on PostgreSQL for the queue) and gives it back at once on a graceful
stop. Which run a claim takes next is `runner.sql.runnable`; the heartbeat's renewal of
the leases held is `runner.sql.lease_renewals`. An expired lease is how a crashed
worker's run is found. A waiting run is not claimable until a person answers it, or until
its approval_timeout passes: then the claim itself records the timeout as the answer, in
its own transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Row, bindparam, func, insert, select, update

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.errors import RunNotFound
from runner.sql import approvals, json_batches
from runner.sql import queues as queue_limits
from runner.sql import releases as release_rules
from runner.sql.backend import backend_for
from runner.sql.payloads import payloads_of
from runner.sql.runnable import Ahead, journal_length, next_claimable
from runner.sql.runs import RunRow, lock_run, stopped_values
from runner.sql.schema import entries, runs
from runner.store.releases import Releases
from runner.store.rows import ENTRY_COLUMNS, entry_values, plain_text
from runner.store.rules import Claim, crash_loop_error, refuse_if_held


def claim_run(
    engine: Engine,
    run_id: str,
    *,
    owner: str,
    lease_seconds: float,
    max_resumes: int,
    steal: bool = False,
    clock: Clock = SYSTEM,
) -> Claim:
    """Take the lease of one run (`runner resume`): refuse while a live worker holds it."""
    with engine.begin() as connection:
        row = lock_run(connection, run_id)
        if row is None:
            raise RunNotFound(f"no run with id {run_id}")
        run = RunRow.of(row)
        at = utc_now(clock)
        refuse_if_held(run, at, steal=steal)
        if run.status is RunStatus.FINISHED:
            return Claim(run, run.lease_epoch, 0, crash_loop=False)
        if run.status is RunStatus.WAITING:
            if run.wait_expires_at is None or run.wait_expires_at > at:
                return Claim(run, run.lease_epoch, 0, crash_loop=False)  # still waits
            row = _timed_out(connection, run, at)
        return take(connection, row, owner, lease_seconds, max_resumes, at)


def _timed_out(connection: Connection, run: RunRow, at: datetime) -> Row[Any]:
    """Deny the call of a run whose wait expired, and give back its row, now queued."""
    approvals.time_out(connection, run, at)
    return connection.execute(select(runs).where(runs.c.id == run.id)).one()


def take(
    connection: Connection,
    row: Row[Any] | Mapping[str, Any],
    owner: str,
    lease_seconds: float,
    max_resumes: int,
    at: datetime,
    *,
    unwait: bool = False,
) -> Claim:
    """Bump the epoch and take the lease, in the caller's transaction (row already locked).

    One UPDATE ... RETURNING (both backends have it) gives back the row as taken. A run
    nobody held counts its journal in that UPDATE; a takeover counts it first, to know
    whether the last holder made progress. `unwait`: the run was waiting, and its wait
    ends in the same statement (a parent claimed back with its last child's end).
    """
    run = RunRow.of(row)
    m = row._mapping if isinstance(row, Row) else row  # a row read as plain SQL: a dict
    takeover = m["lease_owner"] is not None  # the last holder never let go: it crashed
    resumes, stalled = m["resumes"], m["stalled_resumes"]
    recorded: Any = _RECORDED_HERE
    if takeover:
        recorded = journal_length(connection, run.id)
        resumes += 1
        stalled = stalled + 1 if recorded == m["progress_seq"] else 0
    values = leased(m, owner, lease_seconds, at)
    epoch = values["lease_epoch"]
    values.update(resumes=resumes, stalled_resumes=stalled, progress_seq=recorded)
    crash_loop = stalled > max_resumes
    if crash_loop:  # rare: a statement of its own shape, built here
        values.update(
            stopped_values(connection, run.id, StopReason.CRASH_LOOP, at),
            error=crash_loop_error(run.id, stalled, max_resumes),
            lease_owner=None,
            lease_expires_at=None,
        )
        statement = update(runs).where(runs.c.id == run.id).values(**values)
        fresh = connection.execute(statement.returning(*runs.c), {"run_id": run.id}).one()
    else:
        counted = recorded is _RECORDED_HERE
        if counted:
            del values["progress_seq"]
        bound = {f"new_{name}": value for name, value in values.items()}
        if unwait:
            bound.update(new_waiting_since=None, new_wait_expires_at=None)
        statement = _take_statement(counted, unwait)
        fresh = connection.execute(statement, {"run_id": run.id, **bound}).one()
    return Claim(
        RunRow.of(fresh),
        epoch,
        fresh._mapping["progress_seq"],
        crash_loop=crash_loop,
        stalled=stalled,
    )


# The columns every claim sets (`leased`).
LEASED = (
    "status",
    "lease_owner",
    "lease_epoch",
    "lease_expires_at",
    "leased_at",
    "last_seen_at",
    "deadline",
    "updated_at",
)


def leased(
    row: Mapping[Any, Any], owner: str, lease_seconds: float, at: datetime
) -> dict[str, Any]:
    """What every claim of `row` sets on it (by column): running, held by `owner` from `at`,
    its epoch bumped, and the deadline of its `max_seconds` if it had none yet (its first
    claim). A claim's own columns (its resumes, its journal's length) come on top."""
    return {
        "status": RunStatus.RUNNING,
        "lease_owner": owner,
        "lease_epoch": row["lease_epoch"] + 1,
        "lease_expires_at": at + timedelta(seconds=lease_seconds),
        "leased_at": at,
        "last_seen_at": at,
        "deadline": row.get("deadline") or first_deadline(row["budgets"], at),
        "updated_at": at,
    }


def first_deadline(budgets: Mapping[str, Any], at: datetime) -> datetime | None:
    """The deadline a run's first claim at `at` gives it: `max_seconds` on (None: no limit)."""
    max_seconds = budgets.get("max_seconds")
    return None if max_seconds is None else at + timedelta(seconds=float(max_seconds))


# The journal's length, counted inside the UPDATE that takes a run (bound by "run_id").
_RECORDED_HERE = (
    select(func.count())
    .select_from(entries)
    .where(entries.c.run_id == bindparam("run_id"))
    .scalar_subquery()
)

# The columns a claim sets, each bound as "new_<column>" in `_take_statement`.
_TAKEN = (*LEASED, "resumes", "stalled_resumes", "progress_seq")


@functools.cache
def _take_statement(counted: bool, unwait: bool = False) -> Any:
    """The UPDATE ... RETURNING of a claim, built once for each shape (building one costs
    more than running it): `counted`, the journal's length is counted in it; `unwait`, the
    run's wait ends in it."""
    names = (*_TAKEN, "waiting_since", "wait_expires_at") if unwait else _TAKEN
    values: dict[str, Any] = {name: bindparam(f"new_{name}") for name in names}
    if counted:
        values["progress_seq"] = _RECORDED_HERE
    return update(runs).where(runs.c.id == bindparam("run_id")).values(values).returning(*runs.c)


def claim_some(
    engine: Engine,
    *,
    limit: int,
    owner: str,
    lease_seconds: float,
    max_resumes: int,
    skip_agents: Collection[str] = (),
    suspects: bool = True,
    queues: Sequence[str] | None = None,
    executing: Collection[str] = (),
    releases: Releases | None = None,
    clock: Clock = SYSTEM,
) -> list[Claim]:
    """Take up to `limit` runnable runs in one transaction, in claim order: queued (and not
    delayed past now), running under a lease that expired, or waiting past its
    approval_timeout (the timeout is recorded as its answer in this transaction). The
    highest priority goes first, then the oldest. One transaction for many claims is what
    lets one worker fill a thousand slots in seconds.

    `queues` limits the claims to those queues (None: every queue). A queue's limit is never
    exceeded: a queue whose live runs reach it is passed over, checked again under the
    queue's lock for each run found (`runner.queues.Slots`), counting the runs this same
    transaction took before. `skip_agents` leaves alone the runs of agents this worker
    cannot load right now.

    A suspect, a run whose last worker died before it wrote anything, is taken only alone
    and only by an idle worker (`suspects=True`): the batch stops before a suspect it
    cannot take, and ends with one it took. If a suspect kills this worker too, the runs
    beside it would die without progress and be counted against them. Taking nothing,
    rather than the next run, lets busy workers drain so an idle one takes the suspect
    instead of it waiting behind the whole queue.

    `executing`: the runs the claimer is executing now. One whose lease lapsed (its
    heartbeat held up past a whole lease, as on a loaded machine) is not taken over by the
    worker still running it, which would run it twice; another worker may.

    `releases`: the claimer's release (runner.store.releases): the runs of another release
    that a queue pins to their own, or that a check parked, are left alone. None: every run
    is taken as it comes.
    """
    at = utc_now(clock)
    claims: list[Claim | None] = []
    with engine.begin() as connection:
        # The fresh runs found (nobody held them), taken together: see _Together.
        together = _Together(connection, owner, lease_seconds, at)
        kept_to = release_rules.kept_to(releases)
        full = queue_limits.full_queues(connection, at, queues)
        slots = queue_limits.Slots(connection, at)
        refused: list[str] = []  # queues found with no room under their lock, this batch
        spent: set[int] = set()  # the ways of being runnable found empty, this batch
        kept: list[str] = []  # runs found under a lapsed lease that the claimer executes
        # The queued runs read (and locked) ahead, for the whole batch: the runs taken
        # together are updated before they are read again.
        ahead = Ahead(limit, before_reading=lambda: together.take(claims))
        while len(claims) < limit:
            found = next_claimable(
                connection,
                at,
                skip_agents,
                queues,
                full,
                refused,
                spent,
                slots,
                suspects=suspects and not claims,
                executing=executing,
                kept=kept,
                ahead=ahead,
                releases=kept_to,
            )
            if found is None:
                break
            row, holds_slot, suspect = found
            ahead.took(row)
            queue = row._mapping["queue"]
            if row._mapping["status"] == RunStatus.WAITING:
                row = _timed_out(connection, RunRow.of(row), at)
            if together.fits(row, max_resumes):
                together.add(len(claims), row)
                claims.append(None)  # its claim once the runs together are updated
            else:
                claims.append(take(connection, row, owner, lease_seconds, max_resumes, at))
            slots.took(queue, holds_slot)
            if suspect:
                break  # it runs alone
        together.take(claims)
    return [claim for claim in claims if claim is not None]


class _Together:
    """The fresh runs a claim transaction found (queued, nobody held them: no takeover to
    count, no crash loop), taken by ONE UPDATE ... RETURNING for the batch rather than one
    each: the same values `take` sets (the epoch bumped, the lease, the journal's length
    counted in the statement), one statement for each new deadline among them (usually one
    in all). A claim of a hundred runs was a hundred UPDATEs, each describing the run's 35
    columns again (docs/performance/workers.md, A thousand runs in one worker). The rows are locked
    already (FOR UPDATE; SQLite's BEGIN IMMEDIATE), so each epoch is the one read plus one.
    The tasks of those with nothing journaled are journaled by one INSERT after it (`_claim`).
    """

    def __init__(
        self, connection: Connection, owner: str, lease_seconds: float, at: datetime
    ) -> None:
        self.connection = connection
        self.bound = {
            "new_status": RunStatus.RUNNING,
            "new_lease_owner": owner,
            "new_lease_expires_at": at + timedelta(seconds=lease_seconds),
            "new_leased_at": at,
            "new_last_seen_at": at,
            "new_updated_at": at,
        }
        self.at = at
        self.payloads = payloads_of(connection)
        self._rows: list[tuple[int, Row[Any]]] = []  # (its place in the claims, the row)

    def fits(self, row: Row[Any], max_resumes: int) -> bool:
        m = row._mapping
        return m["lease_owner"] is None and not m["stalled_resumes"] > max_resumes

    def add(self, place: int, row: Row[Any]) -> None:
        self._rows.append((place, row))

    def take(self, claims: list[Claim | None]) -> None:
        """Update the runs added so far, and put each one's claim in its place."""
        if not self._rows:
            return
        by_deadline: dict[datetime | None, list[tuple[int, Row[Any]]]] = {}
        for place, row in self._rows:
            by_deadline.setdefault(self._deadline(row), []).append((place, row))
        self._rows = []
        for deadline, rows in by_deadline.items():
            bound: dict[str, Any] = {**self.bound, "ids": [row._mapping["id"] for _, row in rows]}
            if deadline is not None:
                bound["new_deadline"] = deadline
            statement = _take_together_statement(deadline is not None)
            fresh = {r._mapping["id"]: r for r in self.connection.execute(statement, bound)}
            tasks: list[tuple[Any, ...]] = []
            for place, row in rows:
                m = row._mapping
                taken = fresh.get(m["id"])
                epoch = m["lease_epoch"] + 1
                if taken is None or taken._mapping["lease_epoch"] != epoch:  # locked: never
                    raise RuntimeError(f"run {m['id']} changed under its claim's lock")
                run = RunRow.of(taken)
                claims[place] = self._claim(run, epoch, taken, m["stalled_resumes"], tasks)
            if tasks:
                _journal_tasks(self.connection, tasks)

    def _claim(
        self,
        run: RunRow,
        epoch: int,
        taken: Row[Any],
        stalled: int,
        tasks: list[tuple[Any, ...]],
    ) -> Claim:
        """The claim of `run`; a run with nothing journaled has its task's row added to
        `tasks`, journaled in this transaction: a write a run fewer once it starts (a
        thousand at a fleet's start, each taking its turn in the group commit while the
        slots fill). The run's progress was counted before it (`progress_seq`, 0), so a
        takeover counts the task as progress, as it did when the run wrote it itself just
        after its claim (a run that kills its worker before its loop begins, at its agent's
        import say, is a suspect one takeover later than it was)."""
        progress = taken._mapping["progress_seq"]
        if progress:
            return Claim(run, epoch, progress, crash_loop=False, stalled=stalled)
        task = Entry(EntryKind.TASK, 0, Counters(), content=run.task)
        tasks.append(entry_values(run.id, 0, epoch, task, self.at, self.payloads))
        return Claim(run, epoch, 1, crash_loop=False, stalled=stalled, task=task)

    def _deadline(self, row: Row[Any]) -> datetime | None:
        """The deadline the claim sets (None: the run keeps its own), as `take` sets it."""
        m = row._mapping
        if m["deadline"] is not None:
            return None
        # The budgets alone, not the whole run made of the row (`RunRow.of`, which the
        # claim makes of the row its UPDATE returns): one more of each run was 8% of the
        # function calls of a batch's claim.
        return first_deadline(m["budgets"], self.at)


def _journal_tasks(connection: Connection, tasks: Sequence[tuple[Any, ...]]) -> None:
    """Insert the tasks' rows (`entry_values`) in the claim's transaction: on PostgreSQL one
    statement bound with one JSON text (runner.sql.json_batches), where SQLAlchemy's INSERT
    of many rows bound and rendered each value in Python, 0.1 to 0.15 s of a thousand claims
    (docs/performance/workers.md, A thousand runs in one worker); SQLite keeps that INSERT."""
    sql = backend_for(connection.dialect.name).insert_entries()
    if sql is None:
        connection.execute(
            insert(entries), [dict(zip(ENTRY_COLUMNS, t, strict=True)) for t in tasks]
        )
        return
    dbapi_connection = connection.connection.dbapi_connection
    rows = json_batches.entry_rows(connection.dialect, dbapi_connection, tasks)
    connection.exec_driver_sql(sql, {"batch": json_batches.text(rows)})


@functools.cache
def _take_together_statement(deadline: bool) -> Any:
    """`_Together`'s UPDATE ... RETURNING, built once for each shape: `deadline`, it sets
    one (bound as "new_deadline")."""
    counted = (
        select(func.count())
        .select_from(entries)
        .where(entries.c.run_id == runs.c.id)
        .scalar_subquery()
    )
    names = ("status", "lease_owner", "lease_expires_at", "leased_at", "last_seen_at")
    values: dict[str, Any] = {name: bindparam(f"new_{name}") for name in names}
    values.update(
        lease_epoch=runs.c.lease_epoch + 1,
        progress_seq=counted,
        updated_at=bindparam("new_updated_at"),
    )
    if deadline:
        values["deadline"] = bindparam("new_deadline")
    return (
        update(runs)
        .where(runs.c.id.in_(bindparam("ids", expanding=True)))
        .values(values)
        .returning(*runs.c)
    )


def release_run(
    engine: Engine,
    run_id: str,
    epoch: int,
    error: str | None = None,
    clock: Clock = SYSTEM,
    parked_reason: str | None = None,
) -> bool:
    """Give an unfinished run back to the queue at once (graceful shutdown, or an agent
    that would not load: `error` says why, for `runner show`), if `epoch` still holds it:
    fenced like a journal write, so a worker that lost the run meanwhile gives back
    nothing. `parked_reason`: it goes back parked (runner.sql.releases). True if it went."""
    extra: dict[str, Any] = {} if error is None else {"error": plain_text(error)}
    if parked_reason is not None:
        extra["parked_reason"] = parked_reason
    with engine.begin() as connection:
        if error is None:  # a run given back by a worker stopping: wake another for it
            backend_for(connection.dialect.name).wake_workers(connection)
        released = connection.execute(
            update(runs)
            .where(
                runs.c.id == run_id,
                runs.c.lease_epoch == epoch,
                runs.c.status == RunStatus.RUNNING,
            )
            .values(
                status=RunStatus.QUEUED,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=utc_now(clock),
                **extra,
            )
        ).rowcount
    return bool(released)
