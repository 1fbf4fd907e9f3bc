"""Leases: which worker executes a run, fenced by an epoch that every claim bumps.

A worker claims a run with one atomic UPDATE (under BEGIN IMMEDIATE on SQLite, with
FOR UPDATE SKIP LOCKED on PostgreSQL for the queue), renews it with a heartbeat, and gives it
back at once on a graceful stop. An expired lease is how a crashed worker's run is found.
A waiting run is not claimable until a person answers it, or until its approval_timeout
passes: then the claim itself records the timeout as the answer, in its own transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Row, Select, bindparam, func, select, tuple_, update

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.errors import LeaseHeld, RunNotFound
from runner.store import approvals
from runner.store import queues as queue_limits
from runner.store.backend import backend_for
from runner.store.owner import is_dead, local_prefix
from runner.store.runs import RunRow, lock_run, plain_text, starts_with, stopped_values
from runner.store.schema import entries, runs


@dataclass(frozen=True)
class Claim:
    """A lease this worker now holds: write with `epoch` until told otherwise."""

    run: RunRow
    epoch: int
    next_seq: int
    crash_loop: bool  # the run was given up: taken over too often without progress
    # Takeovers in a row that found no new journal entry: more than 0 makes the run a
    # suspect of killing its workers, which a worker runs alone until it progresses.
    stalled: int = 0


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
        if run.status is not RunStatus.FINISHED and not steal and run.lease_is_live(at):
            raise LeaseHeld(
                f"run {run.id} is being executed by {run.lease_owner} (lease until "
                f"{run.lease_expires_at:%H:%M:%S} UTC); pass --steal to take it over"
            )
        if run.status is RunStatus.FINISHED:
            return Claim(run, run.lease_epoch, 0, crash_loop=False)
        if run.status is RunStatus.WAITING:
            if run.wait_expires_at is None or run.wait_expires_at > at:
                return Claim(run, run.lease_epoch, 0, crash_loop=False)  # still waits
            row = _timed_out(connection, run, at)
        return _take(connection, row, owner, lease_seconds, max_resumes, at)


def _timed_out(connection: Connection, run: RunRow, at: datetime) -> Row[Any]:
    """Deny the call of a run whose wait expired, and give back its row, now queued."""
    approvals.time_out(connection, run, at)
    return connection.execute(select(runs).where(runs.c.id == run.id)).one()


def _take(
    connection: Connection,
    row: Row[Any],
    owner: str,
    lease_seconds: float,
    max_resumes: int,
    at: datetime,
) -> Claim:
    """Bump the epoch and take the lease, in the caller's transaction (row already locked).

    One UPDATE ... RETURNING (both backends have it) gives back the row as taken. A run
    nobody held counts its journal in that UPDATE; a takeover counts it first, to know
    whether the last holder made progress.
    """
    run = RunRow.of(row)
    m = row._mapping
    takeover = m["lease_owner"] is not None  # the last holder never let go: it crashed
    resumes, stalled = m["resumes"], m["stalled_resumes"]
    recorded: Any = _RECORDED_HERE
    if takeover:
        recorded = _recorded(connection, run.id)
        resumes += 1
        stalled = stalled + 1 if recorded == m["progress_seq"] else 0
    epoch = m["lease_epoch"] + 1
    deadline = m["deadline"]
    max_seconds = run.budgets.get("max_seconds")
    if deadline is None and max_seconds is not None:
        deadline = at + timedelta(seconds=float(max_seconds))
    values: dict[str, Any] = {
        "status": RunStatus.RUNNING,
        "lease_owner": owner,
        "lease_epoch": epoch,
        "lease_expires_at": at + timedelta(seconds=lease_seconds),
        "leased_at": at,
        "last_seen_at": at,
        "resumes": resumes,
        "stalled_resumes": stalled,
        "progress_seq": recorded,
        "deadline": deadline,
        "updated_at": at,
    }
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
        fresh = connection.execute(_take_statement(counted), {"run_id": run.id, **bound}).one()
    return Claim(
        RunRow.of(fresh),
        epoch,
        fresh._mapping["progress_seq"],
        crash_loop=crash_loop,
        stalled=stalled,
    )


# The journal's length, counted inside the UPDATE that takes a run (bound by "run_id").
_RECORDED_HERE = (
    select(func.count())
    .select_from(entries)
    .where(entries.c.run_id == bindparam("run_id"))
    .scalar_subquery()
)

# The columns a claim sets, each bound as "new_<column>" in `_take_statement`.
_TAKEN = (
    "status",
    "lease_owner",
    "lease_epoch",
    "lease_expires_at",
    "leased_at",
    "last_seen_at",
    "resumes",
    "stalled_resumes",
    "progress_seq",
    "deadline",
    "updated_at",
)


@functools.cache
def _take_statement(counted: bool) -> Any:
    """The UPDATE ... RETURNING of a claim, built once for each shape (building one costs
    more than running it): `counted`, the journal's length is counted in it."""
    values: dict[str, Any] = {name: bindparam(f"new_{name}") for name in _TAKEN}
    if counted:
        values["progress_seq"] = _RECORDED_HERE
    return update(runs).where(runs.c.id == bindparam("run_id")).values(values).returning(*runs.c)


def crash_loop_error(run_id: str, stalled: int, max_resumes: int) -> str:
    """What is known of a crash loop: takeovers with no journal entry, after owners that
    died holding the run. Whether the run itself killed them, nobody can tell."""
    return (
        f"resumed {stalled} times in a row without a new journal entry (max_resumes "
        f"{max_resumes}): each time, its last owner had died without releasing the run; once "
        f"the cause is fixed, continue it with `runner resume {run_id} --max-resumes N`"
    )


def _recorded(connection: Connection, run_id: str) -> int:
    return connection.execute(
        select(func.count()).select_from(entries).where(entries.c.run_id == run_id)
    ).scalar_one()


def _stalls(connection: Connection, row: Row[Any]) -> bool:
    """Whether taking `row` over would count as a takeover without progress."""
    m = row._mapping
    return m["lease_owner"] is not None and _recorded(connection, m["id"]) == m["progress_seq"]


def claim_next(
    engine: Engine,
    *,
    owner: str,
    lease_seconds: float,
    max_resumes: int,
    skip_agents: Collection[str] = (),
    suspects: bool = True,
    queues: Sequence[str] | None = None,
    clock: Clock = SYSTEM,
) -> Claim | None:
    """Take the next runnable run, as `claim_some` takes each of its claims; None: none."""
    taken = claim_some(
        engine,
        limit=1,
        owner=owner,
        lease_seconds=lease_seconds,
        max_resumes=max_resumes,
        skip_agents=skip_agents,
        suspects=suspects,
        queues=queues,
        clock=clock,
    )
    return taken[0] if taken else None


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
    """
    at = utc_now(clock)
    claims: list[Claim] = []
    with engine.begin() as connection:
        full = queue_limits.full_queues(connection, at, queues)
        slots = queue_limits.Slots(connection, at)
        refused: list[str] = []  # queues found with no room under their lock, this batch
        spent: set[int] = set()  # the ways of being runnable found empty, this batch
        while len(claims) < limit:
            found = _next_claimable(
                connection,
                at,
                skip_agents,
                queues,
                full,
                refused,
                spent,
                slots,
                suspects=suspects and not claims,
            )
            if found is None:
                break
            row, holds_slot, suspect = found
            queue = row._mapping["queue"]
            if row._mapping["status"] == RunStatus.WAITING:
                row = _timed_out(connection, RunRow.of(row), at)
            claim = _take(connection, row, owner, lease_seconds, max_resumes, at)
            slots.took(queue, holds_slot)
            claims.append(claim)
            if suspect:
                break  # it runs alone
    return claims


def _next_claimable(
    connection: Connection,
    at: datetime,
    skip_agents: Collection[str],
    queues: Sequence[str] | None,
    full: Sequence[str],
    refused: list[str],
    spent: set[int],
    slots: queue_limits.Slots,
    *,
    suspects: bool,
) -> tuple[Row[Any], bool, bool] | None:
    """The next run to take, whether it holds its queue's slot already (a dead holder's,
    under a lease not expired) and whether it is a suspect; None: none, or a suspect first
    when `suspects` is False. Each pass leaves out one more queue found with no room under
    its lock (full now, or a race lost to another claimer on PostgreSQL): `refused` keeps
    them for the rest of the batch."""
    while True:
        row = _next_runnable(connection, at, skip_agents, queues, [*full, *refused], spent)
        holds_slot = False
        if row is None:
            # A dead holder's run already holds its slot: a full queue may take it over.
            row = _orphan_here(connection, at, skip_agents, queues, refused)
            holds_slot = True
        if row is None:
            return None
        suspect = _stalls(connection, row)
        if suspect and not suspects:
            return None
        queue = row._mapping["queue"]
        if slots.has_room(queue, holds_slot):
            return row, holds_slot, suspect
        refused.append(queue)


def _next_runnable(
    connection: Connection,
    at: datetime,
    skip_agents: Collection[str],
    queues: Sequence[str] | None,
    full: Sequence[str],
    spent: set[int],
) -> Row[Any] | None:
    """The first runnable run by priority, then age, locked (SKIP LOCKED on PostgreSQL).

    One query per way of being runnable, each read in order along its own index and
    stopped at its first row: one query with an OR of the three had to sort every queued
    run on each claim (12 ms with 2,000 queued on PostgreSQL). A run that is runnable
    only after a crash or a timed-out wait is rare, so the last two find nothing at once.
    A way found empty is added to `spent` and not asked again in the same batch: with as
    many queues passed over or more it finds nothing still (a run that became runnable
    that way meanwhile waits for the next batch).
    """
    params = _bounds(skip_agents, queues, full, at=at)
    found = []
    queries = _runnable_queries(queues is not None, bool(full), bool(skip_agents))
    for way, query in enumerate(queries):
        if way in spent:
            continue
        row = connection.execute(query, params).first()
        if row is None:
            spent.add(way)
        else:
            found.append(row)
    # The others found stay locked until this claim commits, a moment: SKIP LOCKED passes
    # them over meanwhile, as it passes over any run another claimer is taking.
    return min(found, key=_claim_order) if found else None


@functools.cache
def _runnable_queries(served: bool, passed: bool, skipping: bool) -> tuple[Select[Any], ...]:
    """The three queries of `_next_runnable`, built once for each shape of their bounds
    (building one costs more than running it)."""
    at = bindparam("at", type_=runs.c.lease_expires_at.type)
    ways = (
        (runs.c.status == RunStatus.QUEUED)
        & (runs.c.not_before.is_(None) | (runs.c.not_before <= at)),
        (runs.c.status == RunStatus.RUNNING)
        & (runs.c.lease_expires_at.is_(None) | (runs.c.lease_expires_at < at)),
        (runs.c.status == RunStatus.WAITING) & (runs.c.wait_expires_at < at),
    )
    return tuple(
        _within(
            select(runs)
            .where(runnable)
            .order_by(runs.c.priority.desc(), runs.c.created_at, runs.c.id)
            .limit(1)
            .with_for_update(skip_locked=True),  # SQLite: dropped; BEGIN IMMEDIATE serialises
            served,
            passed,
            skipping,
        )
        for runnable in ways
    )


def _claim_order(row: Row[Any]) -> tuple[int, datetime, str]:
    m = row._mapping
    return (-m["priority"], m["created_at"], m["id"])


def _within(query: Select[Any], served: bool, passed: bool, skipping: bool) -> Select[Any]:
    """`query` kept to the queues served (`served`), not to those full (`passed`) and not to
    the agents skipped: bound by `_bounds`."""
    if served:
        query = query.where(runs.c.queue.in_(bindparam("served", expanding=True)))
    if passed:
        query = query.where(runs.c.queue.not_in(bindparam("passed", expanding=True)))
    if skipping:
        query = query.where(runs.c.agent.not_in(bindparam("skipped", expanding=True)))
    return query


def _bounds(
    skip_agents: Collection[str], queues: Sequence[str] | None, full: Sequence[str], **more: Any
) -> dict[str, Any]:
    params = dict(more)
    if queues is not None:
        params["served"] = list(queues)
    if full:
        params["passed"] = list(full)
    if skip_agents:
        params["skipped"] = list(skip_agents)
    return params


# How many live leases held on this host one claim looks through for a dead holder.
_ORPHAN_SCAN = 50


def _orphan_here(
    connection: Connection,
    at: datetime,
    skip_agents: Collection[str],
    queues: Sequence[str] | None,
    full: Sequence[str],
) -> Row[Any] | None:
    """A run whose lease has not expired but whose holder, a process on this host, is dead.

    A worker SIGKILLed on this machine leaves its runs to a sibling at once, not after the
    lease: the same test `runner resume` makes. Candidates are read without locks, then the
    one found is locked only if its lease is still the dead process's.
    """
    query = (
        select(runs.c.id, runs.c.lease_owner, runs.c.lease_epoch)
        .where(
            runs.c.status == RunStatus.RUNNING,
            runs.c.lease_expires_at >= at,
            starts_with(runs.c.lease_owner, local_prefix()),
        )
        .order_by(runs.c.priority.desc(), runs.c.created_at, runs.c.id)
        .limit(_ORPHAN_SCAN)
    )
    query = _within(query, queues is not None, bool(full), bool(skip_agents))
    for candidate in connection.execute(query, _bounds(skip_agents, queues, full)).all():
        if not is_dead(candidate.lease_owner):
            continue
        still = (
            select(runs)
            .where(
                runs.c.id == candidate.id,
                runs.c.lease_owner == candidate.lease_owner,
                runs.c.lease_epoch == candidate.lease_epoch,
            )
            .with_for_update(skip_locked=True)
        )
        row = connection.execute(still).first()
        if row is not None:
            return row
    return None


def renew_lease(
    engine: Engine, run_id: str, epoch: int, lease_seconds: float, clock: Clock = SYSTEM
) -> bool:
    """Extend one lease; False once another worker has taken the run."""
    return run_id in renew_leases(engine, {run_id: epoch}, lease_seconds, clock)


# How many leases one heartbeat statement renews (two bound values each: far below the
# drivers' limits), so a worker of a thousand runs renews them all in one.
LEASES_PER_STATEMENT = 2000


def renew_leases(
    engine: Engine, held: Mapping[str, int], lease_seconds: float, clock: Clock = SYSTEM
) -> set[str]:
    """The heartbeat: extend every lease in `held` (run id -> epoch) in one statement, one
    transaction; the ids renewed. A run missing from them was taken over (or has ended)."""
    at = utc_now(clock)
    pairs = list(held.items())
    renewed: set[str] = set()
    with engine.begin() as connection:
        for start in range(0, len(pairs), LEASES_PER_STATEMENT):
            chunk = pairs[start : start + LEASES_PER_STATEMENT]
            result = connection.execute(
                update(runs)
                # Only a running run: a beat that fires between the final commit and the
                # journal's close keeps the epoch, and must not give a finished run a lease.
                .where(
                    tuple_(runs.c.id, runs.c.lease_epoch).in_(chunk),
                    runs.c.status == RunStatus.RUNNING,
                )
                .values(lease_expires_at=at + timedelta(seconds=lease_seconds), last_seen_at=at)
                .returning(runs.c.id)
            )
            renewed.update(result.scalars())
    return renewed


def release_run(
    engine: Engine,
    run_id: str,
    epoch: int,
    error: str | None = None,
    clock: Clock = SYSTEM,
) -> None:
    """Give an unfinished run back to the queue at once (graceful shutdown, or an agent
    that would not load: `error` says why, for `runner show`)."""
    extra: dict[str, Any] = {} if error is None else {"error": plain_text(error)}
    with engine.begin() as connection:
        if error is None:  # a run given back by a worker stopping: wake another for it
            backend_for(connection.dialect.name).wake_workers(connection)
        connection.execute(
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
        )
