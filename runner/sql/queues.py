"""Queues: named lines of runs, and the limits on how many of a queue run at once.

A run's queue, priority and `not_before` are columns of `runs`; a limit is a row of
`queues` (no row, or a NULL `max_running`: no limit). The limit is enforced where runs are
claimed (`runner.leases.claim_some`), in the claim's own transaction, so it holds with any
number of workers on any number of machines: a run counts against its queue while its
status is `running` under a lease that has not expired. A waiting run holds no slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, case, func, select

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.status import RunStatus
from runner.sql.runs import reading, store_named
from runner.sql.schema import queues, runs
from runner.store.rows import QueueInfo
from runner.store.rules import check_limit, check_queue


def _live(at: Any) -> Any:
    """Runs that hold a slot of their queue: running, under a lease not expired at `at`."""
    return (runs.c.status == RunStatus.RUNNING) & (runs.c.lease_expires_at >= at)


_AT = bindparam("at", type_=runs.c.lease_expires_at.type)


# The claim's own queries, built once (building one costs more than running it).
_LIMITED = select(queues.c.name).where(
    queues.c.max_running.is_not(None),
    select(func.count())
    .select_from(runs)
    .where(_live(_AT), runs.c.queue == queues.c.name)
    .scalar_subquery()
    >= queues.c.max_running,
)
_LIMITED_AMONG = _LIMITED.where(queues.c.name.in_(bindparam("among", expanding=True)))
_LOCK_LIMIT = (
    select(queues.c.max_running).where(queues.c.name == bindparam("queue")).with_for_update()
)
_LIVE_IN = (
    select(func.count()).select_from(runs).where(_live(_AT), runs.c.queue == bindparam("queue"))
)


def full_queues(connection: Connection, at: datetime, among: Sequence[str] | None) -> list[str]:
    """The queues (of `among`, or all) whose limit their live runs already reach.

    Read without locks, once per claim transaction: the claim leaves these out of its
    search, and `Slots` checks the queue of each run it finds again, under the queue's lock.
    """
    if among is None:
        return list(connection.execute(_LIMITED, {"at": at}).scalars())
    return list(connection.execute(_LIMITED_AMONG, {"at": at, "among": list(among)}).scalars())


class Slots:
    """The room left in each queue, for one claim transaction of one or more runs.

    A queue's row is locked the first time a run of it is to be taken (FOR UPDATE, held to
    the end of the transaction), and its live runs are counted then, once: on PostgreSQL
    two claimers of one queue would otherwise both count, under READ COMMITTED, before
    either commits, and both see room for one. The second now waits for the first to
    commit and then counts its runs. On SQLite BEGIN IMMEDIATE has serialised the claims
    already (its compiler drops FOR UPDATE). While the lock is held no other claimer can
    add a live run to the queue, so the count stays true if each run this transaction takes
    is added to it (`took`): a batch never takes a queue past its limit.
    """

    def __init__(self, connection: Connection, at: datetime) -> None:
        self.connection, self.at = connection, at
        self._known: dict[str, tuple[int | None, int]] = {}  # queue -> (limit, live runs)

    def has_room(self, queue: str, holds_slot: bool) -> bool:
        """Whether one more run may start in `queue`. `holds_slot`: the run is live already
        (taken over from a dead holder whose lease has not expired) and is counted."""
        limit, live = self._counted(queue)
        return limit is None or live - holds_slot < limit

    def took(self, queue: str, holds_slot: bool) -> None:
        """Count a run this transaction has just taken in `queue`."""
        limit, live = self._counted(queue)
        self._known[queue] = (limit, live if holds_slot else live + 1)

    def _counted(self, queue: str) -> tuple[int | None, int]:
        if queue not in self._known:
            limit = self.connection.execute(_LOCK_LIMIT, {"queue": queue}).scalar()
            live = 0
            if limit is not None:  # no row, or no limit in it: nothing to count
                live = self.connection.execute(
                    _LIVE_IN, {"queue": queue, "at": self.at}
                ).scalar_one()
            self._known[queue] = (limit, live)
        return self._known[queue]


def set_limit(engine: Engine, name: str, limit: int | None, clock: Clock = SYSTEM) -> None:
    """Store the queue's limit (None: no limit). Runs already running go on: a lower limit
    only holds back the claims that follow until fewer run."""
    check_queue(name)
    limit = check_limit(limit)
    at = utc_now(clock)
    values = {"max_running": limit, "updated_at": at}
    store_named(engine, queues, name, values, f"the limit of queue {name}")


def list_queues(engine: Engine, at: datetime) -> list[QueueInfo]:
    """Every queue that has a limit stored or an unfinished run, by name."""
    unfinished = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
    queued = runs.c.status == RunStatus.QUEUED
    delayed = queued & runs.c.not_before.is_not(None) & (runs.c.not_before > at)

    def count(condition: Any) -> Any:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    counts = (
        select(
            runs.c.queue,
            count(queued & ~delayed),
            count(delayed),
            count(_live(at)),
            count(runs.c.status == RunStatus.WAITING),
        )
        .where(runs.c.status.in_(unfinished))
        .group_by(runs.c.queue)
    )
    with reading(engine) as connection:
        stored = {row.name: row for row in connection.execute(select(queues))}
        found = {row[0]: tuple(int(n) for n in row[1:]) for row in connection.execute(counts)}
    names = sorted(set(stored) | set(found))
    listed = []
    for name in names:
        row = stored.get(name)
        ready, later, live, parked = found.get(name, (0, 0, 0, 0))
        listed.append(
            QueueInfo(
                name,
                None if row is None else row.max_running,
                ready,
                later,
                live,
                parked,
                keep_seconds=None if row is None else row.keep_seconds,
                keep_runs=None if row is None else row.keep_runs,
                older_releases=(row.older_releases if row is not None else None) or "continue",
            )
        )
    return listed
