"""Which run a claim takes next: the first runnable run by priority, then age (queued and
not delayed, running under an expired lease, or waiting past its approval_timeout), or a
run on this host whose holder died under a live lease; kept to the queues served, passing
over full queues and the agents a worker cannot load. `runner.sql.leases` takes what is
found here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Row,
    Select,
    and_,
    bindparam,
    func,
    select,
)

from runner.core.status import RunStatus
from runner.sql import queues as queue_limits
from runner.sql import releases as release_rules
from runner.sql.backend import backend_for
from runner.sql.runs import reading, starts_with
from runner.sql.schema import entries, runs
from runner.store.owner import is_dead, local_prefix
from runner.store.rows import DueQueued


def next_claimable(
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
    executing: Collection[str] = (),
    kept: list[str] | None = None,
    ahead: Ahead | None = None,
    releases: release_rules.Kept = release_rules.NOT_KEPT,
) -> tuple[Row[Any], bool, bool] | None:
    """The next run to take, whether it holds its queue's slot already (a dead holder's,
    under a lease not expired) and whether it is a suspect; None: none, or a suspect first
    when `suspects` is False. Each pass leaves out one more queue found with no room under
    its lock (full now, or a race lost to another claimer on PostgreSQL): `refused` keeps
    them for the rest of the batch.

    `executing`: the runs the claimer is executing now, never taken over by it when their
    lease lapsed (its heartbeat was held up: the next beat renews the lease); `kept`
    collects those found, for the rest of the batch. `ahead`: the queued runs read and
    locked ahead by this batch (see Ahead). `releases`: the runs of another release the
    claimer leaves alone (runner.sql.releases)."""
    kept = [] if kept is None else kept
    while True:
        row = _next_runnable(
            connection,
            at,
            skip_agents,
            queues,
            [*full, *refused],
            spent,
            executing,
            kept,
            ahead,
            releases,
        )
        holds_slot = False
        if row is None:
            # A dead holder's run already holds its slot: a full queue may take it over.
            row = _orphan_here(connection, at, skip_agents, queues, refused, releases)
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
    executing: Collection[str] = (),
    kept: list[str] | None = None,
    ahead: Ahead | None = None,
    releases: release_rules.Kept = release_rules.NOT_KEPT,
) -> Row[Any] | None:
    """The first runnable run by priority, then age, locked (SKIP LOCKED on PostgreSQL).

    One query per way of being runnable, each read in order along its own index and
    stopped at its first row: one query with an OR of the three had to sort every queued
    run on each claim (12 ms with 2,000 queued on PostgreSQL). A run that is runnable
    only after a crash or a timed-out wait is rare, so the last two find nothing at once.
    A way found empty is added to `spent` and not asked again in the same batch: with as
    many queues passed over or more it finds nothing still (a run that became runnable
    that way meanwhile waits for the next batch).

    A run under a lapsed lease that the claimer itself is executing (`executing`) is
    passed over, and added to `kept`: the claimer taking it again would run it twice in one
    process. Rare (a heartbeat held up past a whole lease), so the queries that leave out
    `kept` are only built and bound once one was found.
    """
    kept = [] if kept is None else kept
    ahead = Ahead(1) if ahead is None else ahead
    while True:
        params = _bounds(
            skip_agents, queues, full, kept, at=at, ahead=ahead.wanted, **releases.params
        )
        found = []
        queued = ahead.next(full)
        if queued is not None:
            found.append(queued)
        shape = (
            queues is not None,
            bool(full),
            bool(skip_agents),
            bool(kept),
            releases.kind,
        )
        for way, query in enumerate(_runnable_queries(*shape)):
            if way in spent or (way == _QUEUED and queued is not None):
                continue
            if way == _QUEUED:
                if ahead.before_reading is not None:
                    ahead.before_reading()
                rows = connection.execute(query, params).all()
                ahead.read(rows)
                row = ahead.next(full)
                if len(rows) < ahead.wanted:
                    spent.add(way)  # every queued run it may take is in `ahead` now
            else:
                row = connection.execute(query, params).first()
            if row is None:
                spent.add(way)
            else:
                found.append(row)
        # The others found stay locked until this claim commits, a moment: SKIP LOCKED
        # passes them over meanwhile, as it passes over any run another claimer is taking.
        first = min(found, key=_claim_order) if found else None
        if first is None or not _executed_by_claimer(first, executing):
            return first
        kept.append(first._mapping["id"])


def _queued_by(at: Any) -> ColumnElement[bool]:
    """Queued and due by `at` (a value or a bound parameter): the first way of being
    runnable, and what a drain asks about."""
    return and_(
        runs.c.status == RunStatus.QUEUED, runs.c.not_before.is_(None) | (runs.c.not_before <= at)
    )


# How many queued runs `due_queued` looks at: a drain that found nothing to claim asks it,
# and a held run is one being claimed or marked by a follower, a moment.
_DUE_LOOK = 50


def due_queued(engine: Engine, queues: Sequence[str] | None, at: datetime) -> DueQueued:
    """The runs in `queues` (None: any) queued and due by `at` (the first `_DUE_LOOK`):
    how many are free, and how many another transaction holds right now: another claimer
    taking one, or a follower's mark (FOR SHARE, see runner.sql.follows). A claim on
    PostgreSQL passes a held run over (SKIP LOCKED), so a drain that found nothing to
    claim asks this before it ends. On SQLite none is ever held (the file's write lock
    serialises claims)."""
    due = _queued_by(at)
    if queues is not None:
        due = due & runs.c.queue.in_(queues)
    seen_query = (
        select(runs.c.id)
        .where(due)
        .order_by(runs.c.priority.desc(), runs.c.created_at, runs.c.id)
        .limit(_DUE_LOOK)
    )
    if not backend_for(engine.dialect.name).claims_pass_held:
        with reading(engine) as connection:
            return DueQueued(free=len(connection.execute(seen_query).all()))
    with engine.connect() as connection, connection.begin() as transaction:
        seen = connection.execute(seen_query).scalars().all()
        if not seen:
            return DueQueued()
        # Locked only to learn which are free; rolled back at once. A run claimed since
        # it was seen is no longer due: counted as held, the drain looks once more.
        free = connection.execute(
            select(runs.c.id).where(runs.c.id.in_(seen), due).with_for_update(skip_locked=True)
        ).all()
        transaction.rollback()
    return DueQueued(free=len(free), held=len(seen) - len(free))


# The way of being runnable that most claims take (queued), the first of the three.
_QUEUED = 0


class Ahead:
    """The queued runs one claim transaction has read and locked ahead, in claim order.

    At saturation a worker claims a few runs at a time, each queued: one SELECT of as many
    as the batch may take, rather than one per run, is about half the claim's statements.
    A run read ahead stays locked (FOR UPDATE) until the claim commits, as the runs that
    one query per way used to find and leave did; one in a queue found full meanwhile is
    passed over, as the query would have passed it over.
    """

    def __init__(self, wanted: int, before_reading: Callable[[], None] | None = None) -> None:
        self.wanted = max(1, wanted)
        self._rows: list[Row[Any]] = []
        # Called before the queued runs are read again: a claim that updates the runs it
        # took only later (leases._Together) updates them here, or the read finds them
        # queued still, and locked by this very transaction, which SKIP LOCKED passes not.
        self.before_reading = before_reading

    def read(self, rows: Sequence[Row[Any]]) -> None:
        self._rows = list(reversed(rows))  # popped from the end, first in claim order

    def next(self, passed: Collection[str]) -> Row[Any] | None:
        """The first run read ahead and not taken yet, in no queue of `passed`."""
        while self._rows:
            row = self._rows[-1]
            if row._mapping["queue"] not in passed:
                return row
            self._rows.pop()
        return None

    def took(self, row: Row[Any]) -> None:
        """`row` was taken (or passed over for good): not offered again."""
        if self._rows and self._rows[-1] is row:
            self._rows.pop()


def _executed_by_claimer(row: Row[Any], executing: Collection[str]) -> bool:
    """Whether `row` is a running run the claimer is executing (its lease lapsed). A queued
    or waiting one is not: its execution parked, and a claim starts the next."""
    m = row._mapping
    return m["status"] == RunStatus.RUNNING and m["id"] in executing


@functools.cache
def _runnable_queries(
    served: bool,
    passed: bool,
    skipping: bool,
    keeping: bool = False,
    releasing: release_rules.Keeping = "",
) -> tuple[Select[Any], ...]:
    """The three queries of `_next_runnable`, built once for each shape of their bounds
    (building one costs more than running it)."""
    at = bindparam("at", type_=runs.c.lease_expires_at.type)
    ways = (
        _queued_by(at),
        (runs.c.status == RunStatus.RUNNING)
        & (runs.c.lease_expires_at.is_(None) | (runs.c.lease_expires_at < at)),
        (runs.c.status == RunStatus.WAITING) & (runs.c.wait_expires_at < at),
    )
    return tuple(
        _within(
            select(runs)
            .where(runnable)
            .order_by(runs.c.priority.desc(), runs.c.created_at, runs.c.id)
            # The queued runs: as many as the batch may take (Ahead); the others: the first.
            .limit(bindparam("ahead", type_=Integer) if way == _QUEUED else 1)
            .with_for_update(skip_locked=True),  # SQLite: dropped; BEGIN IMMEDIATE serialises
            served,
            passed,
            skipping,
            keeping,
            releasing,
        )
        for way, runnable in enumerate(ways)
    )


def _claim_order(row: Row[Any]) -> tuple[int, datetime, str]:
    m = row._mapping
    return (-m["priority"], m["created_at"], m["id"])


def _within(
    query: Select[Any],
    served: bool,
    passed: bool,
    skipping: bool,
    keeping: bool = False,
    releasing: release_rules.Keeping = "",
) -> Select[Any]:
    """`query` kept to the queues served (`served`), not to those full (`passed`), not to
    the agents skipped, not to the runs the claimer keeps (`keeping`), and to the runs the
    claimer's release may take (`releasing`: runner.sql.releases): bound by
    `_bounds` (and the release's own values)."""
    if releasing:
        query = query.where(release_rules.condition(releasing))
    if served:
        query = query.where(runs.c.queue.in_(bindparam("served", expanding=True)))
    if passed:
        query = query.where(runs.c.queue.not_in(bindparam("passed", expanding=True)))
    if skipping:
        query = query.where(runs.c.agent.not_in(bindparam("skipped", expanding=True)))
    if keeping:
        query = query.where(runs.c.id.not_in(bindparam("kept", expanding=True)))
    return query


def _bounds(
    skip_agents: Collection[str],
    queues: Sequence[str] | None,
    full: Sequence[str],
    kept: Sequence[str] = (),
    **more: Any,
) -> dict[str, Any]:
    params = dict(more)
    if kept:
        params["kept"] = list(kept)
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
    releases: release_rules.Kept = release_rules.NOT_KEPT,
) -> Row[Any] | None:
    """A run whose lease has not expired but whose holder, a process on this host, is dead.

    A worker SIGKILLed on this machine leaves its runs to a sibling at once, not after the
    lease: the same test `runner resume` makes. Candidates are read without locks, then the
    one found is locked only if its lease is still the dead process's.
    """
    query = _orphans_query(
        local_prefix(), queues is not None, bool(full), bool(skip_agents), releases.kind
    )
    params = _bounds(skip_agents, queues, full, at=at, **releases.params)
    # A busy worker's scan finds its own live runs, one holder fifty times: asked once.
    dead: dict[str, bool] = {}
    for candidate in connection.execute(query, params).all():
        owner = candidate.lease_owner
        if owner not in dead:
            dead[owner] = is_dead(owner)
        if not dead[owner]:
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


@functools.cache
def _orphans_query(
    prefix: str,
    served: bool,
    passed: bool,
    skipping: bool,
    releasing: release_rules.Keeping = "",
) -> Select[Any]:
    """`_orphan_here`'s scan, built once for each shape of its bounds (building it cost
    more than running it, on every claim of a busy worker)."""
    at = bindparam("at", type_=runs.c.lease_expires_at.type)
    query = (
        select(runs.c.id, runs.c.lease_owner, runs.c.lease_epoch)
        .where(
            runs.c.status == RunStatus.RUNNING,
            runs.c.lease_expires_at >= at,
            starts_with(runs.c.lease_owner, prefix),
        )
        .order_by(runs.c.priority.desc(), runs.c.created_at, runs.c.id)
        .limit(_ORPHAN_SCAN)
    )
    return _within(query, served, passed, skipping, releasing=releasing)


def _stalls(connection: Connection, row: Row[Any]) -> bool:
    """Whether taking `row` over would count as a takeover without progress."""
    m = row._mapping
    return m["lease_owner"] is not None and journal_length(connection, m["id"]) == m["progress_seq"]


def journal_length(connection: Connection, run_id: str) -> int:
    """How many entries the run's journal holds: a takeover compares it with the run's
    `progress_seq` to tell whether the last holder made progress."""
    return connection.execute(
        select(func.count()).select_from(entries).where(entries.c.run_id == run_id)
    ).scalar_one()
