"""Waking a limit's line when a call ends: the runs parked for a slot are queued again as
soon as one frees, as an answer queues the run that waited for it.

A run parked only by a limit's concurrency cannot know when a call in flight will end, so
it parks with a long safety recheck (runner.store.rules.CONCURRENCY_RECHECK_SECONDS)
and the call's settle wakes it: in the settle's transaction, with the limit's row locked as
a reservation locks it (so a run parking at the same moment is seen, or sees the settle),
the runs in line are taken in their order and each one whose call now fits (the same rule
as a reservation, runner.store.rules.Room, the runs woken before it counted as in
flight) becomes runnable now; the first that does not fit stops the walk, so nobody is
woken past a run ahead of it. Both stores wake by `woken`; the SQL one NOTIFYs the workers.

`first_parked` tells a drain (`runner worker --once`) when the next parked run comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, exists, func, select, update

from runner.core.status import RunStatus
from runner.sql.backend import backend_for
from runner.sql.limits import charges, live_run
from runner.sql.runs import reading
from runner.sql.schema import limit_waiters, runs
from runner.store.rules import Waiter, aware, woken


def first_parked(engine: Engine, queues: Sequence[str] | None, by: datetime) -> datetime | None:
    """The first wake-up, no later than `by`, of a run in `queues` (None: any) parked by a
    limit: queued, with a wake-up time, in a limit's line."""
    query = select(func.min(runs.c.not_before)).where(
        runs.c.status == RunStatus.QUEUED,
        runs.c.not_before <= by,
        exists().where(limit_waiters.c.run_id == runs.c.id),
    )
    if queues is not None:
        query = query.where(runs.c.queue.in_(queues))
    with reading(engine) as connection:
        found = connection.execute(query).scalar()
    return None if found is None else aware(found)


def wake_line(connection: Connection, limit: Any, at: datetime) -> list[str]:
    """Wake the runs of `limit`'s line whose calls fit now (in the caller's transaction,
    which holds the limit's row); the ids woken."""
    w = limit_waiters.c
    rows = connection.execute(
        select(w.run_id, w.tokens, runs.c.status, runs.c.not_before)
        .join(runs, runs.c.id == w.run_id)
        .where(w.limit_name == limit.name, live_run(at))
        .order_by(w.waiting_since, w.run_id)
    ).all()
    if not rows:
        return []
    line = [
        Waiter(
            row.run_id,
            int(row.tokens),
            row.status == RunStatus.QUEUED
            and row.not_before is not None
            and aware(row.not_before) > at,
        )
        for row in rows
    ]
    found = woken(limit._mapping, at, charges(connection, limit.name, at), line)
    if found:
        connection.execute(
            update(runs)
            .where(runs.c.id.in_(found), runs.c.status == RunStatus.QUEUED)
            .values(not_before=at)
        )
        backend_for(connection.dialect.name).wake_workers(connection)
    return found
