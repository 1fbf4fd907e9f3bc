"""Provider limits shared by the fleet: set, listed and removed; what each has charged.

A limit is a row of `limits` (tokens and requests per minute, calls at once); the model calls
charged to it are rows of `limit_reservations`, and the runs in line for it rows of
`limit_waiters` (runner.sql.reservations reserves and settles them). What a limit has
charged is counted here, once, for reservations and for `runner limit list` alike: every
call reserved in the last minute, each at its reported usage once settled, or at its
estimate until then. A call whose worker died before settling it still counts, at its
estimate, for the rest of its minute: the provider may well have received it and charged
it to its own minute, and a call sent again by the run's next worker is a second request
there. It stops counting as in flight (against the concurrency) once its lease is gone:
nothing holds a slot past the lease.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, exists, func, or_, select

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.limits import COUNTED_SECONDS, UNSETTLED_GRACE_SECONDS, counted_from
from runner.core.status import RunStatus
from runner.errors import LimitNotFound
from runner.sql.runs import reading, store_named
from runner.sql.schema import limit_reservations, limit_waiters, limits, runs
from runner.store.rows import LimitInfo
from runner.store.rules import (
    WAITER_GRACE_SECONDS,
    Charge,
    aware,
    check_limit_name,
    limit_values,
)


def set_limit(
    engine: Engine,
    name: str,
    *,
    tokens_per_minute: int | None,
    requests_per_minute: int | None,
    concurrency: int | None = None,
    clock: Clock = SYSTEM,
) -> None:
    """Store limit `name` (None for any of the three: not limited by it). Calls reserved
    already stay charged; the next reservations are checked against the new numbers."""
    check_limit_name(name)
    values: dict[str, Any] = limit_values(tokens_per_minute, requests_per_minute, concurrency)
    values["updated_at"] = utc_now(clock)
    store_named(engine, limits, name, values, f"limit {name}")


def remove_limit(engine: Engine, name: str) -> None:
    """Remove limit `name` with its reservations and its line (LimitNotFound if none):
    its runs' calls draw from nothing from now on."""
    check_limit_name(name)
    with engine.begin() as connection:
        # The children first: SQLite enforces no foreign key unless told to.
        connection.execute(delete(limit_waiters).where(limit_waiters.c.limit_name == name))
        connection.execute(
            delete(limit_reservations).where(limit_reservations.c.limit_name == name)
        )
        if not connection.execute(delete(limits).where(limits.c.name == name)).rowcount:
            raise LimitNotFound(f"no limit named {name}")


# -- what a limit has charged -----------------------------------------------------------------


def held_by_live_lease(at: Any) -> Any:
    """A reservation's run is still held under the lease that reserved it, at `at`."""
    return exists().where(
        runs.c.id == limit_reservations.c.run_id,
        runs.c.lease_epoch == limit_reservations.c.lease_epoch,
        runs.c.status == RunStatus.RUNNING,
        runs.c.lease_expires_at >= at,
    )


def charges(connection: Connection, name: str, at: datetime) -> list[Charge]:
    """The calls charged to `name` over the minute up to `at`, oldest first."""
    r = limit_reservations.c
    since = at - timedelta(seconds=COUNTED_SECONDS)
    found = connection.execute(
        select(r.tokens, r.reserved_at, r.settled, r.settled_at)
        .add_columns(held_by_live_lease(at).label("live"))
        .where(
            r.limit_name == name,
            r.reserved_at > since - timedelta(seconds=UNSETTLED_GRACE_SECONDS),
        )
    )
    charged = []
    for row in found:
        settled_at = None if row.settled_at is None else aware(row.settled_at)
        start = counted_from(aware(row.reserved_at), bool(row.settled), settled_at)
        if start > since:
            in_flight = not row.settled and bool(row.live)
            charged.append(Charge(int(row.tokens), start, in_flight))
    return sorted(charged, key=lambda charge: charge.reserved_at)


def live_waiter(at: Any) -> Any:
    """A waiter's run is still coming back for its place: running now, or queued with a
    wake-up time no more than WAITER_GRACE_SECONDS ago."""
    return exists().where(runs.c.id == limit_waiters.c.run_id, live_run(at))


def live_run(at: Any) -> Any:
    """The run of `runs` is still coming back for its place in a line (see live_waiter)."""
    grace = timedelta(seconds=WAITER_GRACE_SECONDS)
    return or_(
        runs.c.status == RunStatus.RUNNING,
        and_(
            runs.c.status == RunStatus.QUEUED,
            or_(runs.c.not_before.is_(None), runs.c.not_before >= at - grace),
        ),
    )


def list_limits(engine: Engine, at: datetime) -> list[LimitInfo]:
    """Every limit, by name, with what it has charged over the minute up to `at`."""
    found: list[LimitInfo] = []
    with reading(engine) as connection:
        rows = list(connection.execute(select(limits).order_by(limits.c.name)))
        for row in rows:
            charged = charges(connection, row.name, at)
            waiting = connection.execute(
                select(func.count())
                .select_from(limit_waiters)
                .where(limit_waiters.c.limit_name == row.name, live_waiter(at))
            ).scalar_one()
            backoff = aware(row.backoff_until) if row.backoff_until is not None else None
            found.append(
                LimitInfo(
                    name=row.name,
                    tokens_per_minute=row.tokens_per_minute,
                    requests_per_minute=row.requests_per_minute,
                    concurrency=row.concurrency,
                    tokens=sum(charge.tokens for charge in charged),
                    requests=len(charged),
                    in_flight=sum(charge.in_flight for charge in charged),
                    waiting=int(waiting),
                    backoff_until=backoff if backoff is not None and backoff > at else None,
                )
            )
    return found
