"""Provider limits shared by the fleet: set, listed and removed; what each has charged.

A limit is a row of `limits` (tokens and requests per minute, calls at once); the model calls
charged to it are rows of `limit_reservations`, and the runs in line for it rows of
`limit_waiters` (runner.sql.reservations reserves and settles them). What a limit has
charged is counted here, once, for reservations and for `runner limit list` alike: every
call whose minute (runner.core.limits.counted_from) overlaps the minute up to now, each at
its reported usage once settled, or at its estimate until then. A row keeps where its
minute starts (`counted_from`: its reservation plus the grace, then its settle), and the
reads are ranges of it: a call that ran longer than a minute, however long ago it was
reserved, is charged its usage for the minute after its settle, as the provider charges it.
A call whose worker died before settling it still counts, at its estimate, for the rest of
its minute: the provider may well have received it and charged it to its own minute, and a
call sent again by the run's next worker is a second request there. A call not settled
counts as in flight (against the concurrency) for as long as the lease that reserved it
lives, however long ago that was: a slow model's call past its minute no longer counts
against tokens and requests per minute, but still holds its slot (and its row is kept until
it settles). It stops counting as in flight once its lease is gone: nothing holds a slot
past the lease.

A settle that finds no row (`settle_call`) writes the call anew, settled: its row was swept
(its lease lapsed, and its minute ended a minute before), yet the provider charged its usage.
A worker fenced out, or one whose heartbeats failed while its call was in flight, so still
charges what it used, from its settle, as one request, and nothing else: the row holds no
slot (settled) and the run is not touched. A settle that finds its row only updates it: a
call is one row, counted once.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    exists,
    false,
    func,
    or_,
    select,
    true,
    update,
)

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.limits import COUNTED_SECONDS, WINDOW_SECONDS, counted_from
from runner.core.status import RunStatus
from runner.errors import LimitNotFound
from runner.sql.backend import backend_for
from runner.sql.runs import reading, store_named
from runner.sql.schema import (
    Timestamp,
    limit_reservations,
    limit_seconds,
    limit_waiters,
    limits,
    runs,
)
from runner.store.rows import LimitInfo
from runner.store.rules import (
    WAITER_GRACE_SECONDS,
    Charge,
    Charged,
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
        connection.execute(delete(limit_seconds).where(limit_seconds.c.limit_name == name))
        connection.execute(
            delete(limit_reservations).where(limit_reservations.c.limit_name == name)
        )
        if not connection.execute(delete(limits).where(limits.c.name == name)).rowcount:
            raise LimitNotFound(f"no limit named {name}")


# -- locking a limit to reserve from it -------------------------------------------------------

_LOCKED = select(limits).where(limits.c.name == bindparam("name")).with_for_update()
# PostgreSQL: a reservation made in a journal write's one statement (runner.sql.reserving)
# reads the minute as of its start, before it waits for the row's lock, and reserves only
# if the row's `changes` is still what it read then. So every transaction that reserves from
# the limit, or puts a run in its line, marks the row as it locks it: a plain FOR UPDATE
# leaves the row as it was, and a reservation committed between that statement's read and
# its lock would go unseen.
# (An UPDATE keeps the binds named as the table's columns for itself: hence `limit`.)
_BUMPED = (
    update(limits).where(limits.c.name == bindparam("limit")).values(changes=limits.c.changes + 1)
)
_BUMPED_RETURNING = _BUMPED.returning(*limits.c)


def locked_to_reserve(connection: Connection, name: str) -> Any:
    """Lock limit `name`'s row for a transaction that reserves from it or parks a run in
    its line (in the caller's transaction): the row, or None if the limit is not set."""
    if backend_for(connection.dialect.name).reserves_in_insert:
        return connection.execute(_BUMPED_RETURNING, {"limit": name}).first()
    return connection.execute(_LOCKED, {"name": name}).first()


def bumped(columns: Any) -> Any:
    """`locked_to_reserve`'s UPDATE, returning `columns` (PostgreSQL), its limit bound as
    `limit`."""
    return _BUMPED.returning(*columns)


# -- what a limit has charged -----------------------------------------------------------------


def held_by_live_lease(at: Any, reservations: Any = limit_reservations) -> Any:
    """A reservation's run is still held under the lease that reserved it, at `at`
    (`reservations`: the table, or an alias of it)."""
    return exists().where(
        runs.c.id == reservations.c.run_id,
        runs.c.lease_epoch == reservations.c.lease_epoch,
        runs.c.status == RunStatus.RUNNING,
        runs.c.lease_expires_at >= at,
    )


# The calls in flight: not settled, their lease alive, whenever their minute started. Read
# apart from the minute's, through the partial index of the rows not settled (revision
# 0024), so that the count reads those few rows only, never the minute's settled ones: as
# a range of (limit_name, counted_from) it read every row of the minute before that the
# sweep had not yet deleted, and PostgreSQL planned it as a scan of the whole table for
# each run holding a lease. The filter on `settled` is the index's predicate as written
# there (runner.sql.schema): a planner uses a partial index only for a statement whose
# filter implies it, and SQLite only for one that repeats it.
_flying = limit_reservations.alias("flying")
_unsettled = limit_reservations.alias("unsettled")


def _in_flight(name: Any, at: Any) -> Any:
    return and_(
        _flying.c.limit_name == name,
        _flying.c.settled == false(),
        held_by_live_lease(at, _flying),
    )


def charges(connection: Connection, name: str, at: datetime) -> list[Charge]:
    """The calls charged to `name` over the minute up to `at`, oldest first, then those in
    flight since before it (Charge.counted False)."""
    r = limit_reservations.c
    since = at - timedelta(seconds=COUNTED_SECONDS)
    minute = (
        select(r.tokens, r.counted_from, r.settled)
        .add_columns(held_by_live_lease(at).label("live"))
        .where(r.limit_name == name, r.counted_from > since)
    )
    flying = select(_flying.c.tokens, _flying.c.counted_from).where(_in_flight(name, at))
    charged = [
        Charge(int(row.tokens), aware(row.counted_from), not row.settled and bool(row.live))
        for row in connection.execute(minute)
    ]
    # Those of the minute are charged above already.
    older = [
        Charge(int(row.tokens), start, True, counted=False)
        for row in connection.execute(flying)
        if (start := aware(row.counted_from)) <= since
    ]
    return sorted(charged, key=lambda charge: charge.reserved_at) + older


def minute_charged(name: Any, since: Any, edge: Any, by_second: bool) -> Any:
    """A selectable of one row: the `tokens` and `calls` charged to limit `name` over the
    minute after `since` (every call whose `counted_from` is later: one range of the
    index). `by_second` (PostgreSQL, runner.sql.backend.sums_by_second): the same total
    from `limit_seconds` (revision 0026), the settled calls of each second wholly after
    `since`, with, from `limit_reservations`, the settled calls of the second `since` falls
    in (before `edge`, the next whole second: `minute_edge`) and every call not settled
    (the partial index's few rows): about 60 sums and one second of calls, where the range
    read every call of the minute."""
    r = limit_reservations.c
    if not by_second:
        return select(
            func.coalesce(func.sum(r.tokens), 0).label("tokens"), func.count().label("calls")
        ).where(r.limit_name == name, r.counted_from > since)
    s = limit_seconds.c
    seconds = (
        select(
            func.coalesce(func.sum(s.tokens), 0).label("tokens"),
            func.coalesce(func.sum(s.calls), 0).label("calls"),
        )
        .where(s.limit_name == name, s.second > since)
        .subquery("minute_seconds")
    )
    first = (
        select(func.coalesce(func.sum(r.tokens), 0).label("tokens"), func.count().label("calls"))
        .where(
            r.limit_name == name,
            r.counted_from > since,
            r.counted_from < edge,
            r.settled == true(),
        )
        .subquery("minute_first_second")
    )
    # Every call not settled is read through the partial index, and those of the minute
    # kept by a filter: with `counted_from > since` in its WHERE, PostgreSQL planned it as
    # a range of the minute's index, every call of the minute read to find the few not
    # settled (0.8 ms for 3,000).
    u = _unsettled.c
    of_minute = u.counted_from > since
    unsettled = (
        select(
            func.coalesce(func.sum(u.tokens).filter(of_minute), 0).label("tokens"),
            func.count().filter(of_minute).label("calls"),
        )
        .where(u.limit_name == name, u.settled == false())  # the partial index's predicate
        .subquery("minute_unsettled")
    )
    return select(
        (seconds.c.tokens + first.c.tokens + unsettled.c.tokens).label("tokens"),
        (seconds.c.calls + first.c.calls + unsettled.c.calls).label("calls"),
    ).select_from(seconds.join(first, true()).join(unsettled, true()))  # a row each


def minute_edge(since: datetime) -> datetime:
    """The first whole second after `since` (UTC): the seconds from it on are summed whole
    in `limit_seconds`."""
    return since.replace(microsecond=0) + timedelta(seconds=1)


def _totals(in_flight: bool, by_second: bool) -> Any:
    """What `charges` counts, summed in the database (`in_flight`: the calls in flight too,
    which asks the runs' leases, so only a limit with a concurrency does; `by_second`: see
    `minute_charged`)."""
    at, since = bindparam("at", type_=Timestamp), bindparam("since", type_=Timestamp)
    name: Any = bindparam("name")
    flying: Any = 0
    if in_flight:
        flying = select(func.count()).select_from(_flying)
        flying = flying.where(_in_flight(name, at)).scalar_subquery()
    edge = bindparam("edge", type_=Timestamp)
    minute = minute_charged(name, since, edge, by_second)
    if not by_second:  # one range of the index, as before
        return minute.add_columns(flying)
    minute = minute.subquery("minute")
    return select(minute.c.tokens, minute.c.calls, flying)


_TOTALS = {(f, s): _totals(f, s) for f in (False, True) for s in (False, True)}


def charged(connection: Connection, name: str, at: datetime, *, in_flight: bool) -> Charged:
    """What `name` has charged over the minute up to `at` (as `charges`), its totals summed
    in the database; the charges themselves are read only if asked for (Charged.listed)."""
    statement = totals(in_flight, backend_for(connection.dialect.name).sums_by_second)
    tokens, requests, flying = connection.execute(statement, totals_bound(name, at)).one()
    return Charged(int(tokens), int(requests), int(flying), lambda: charges(connection, name, at))


def totals(in_flight: bool, by_second: bool = False) -> Any:
    """The statement `charged` sums with (bound by `totals_bound`)."""
    return _TOTALS[in_flight, by_second]


def totals_bound(name: str, at: datetime) -> dict[str, Any]:
    """The values of `totals`' binds for limit `name` at `at`."""
    since = at - timedelta(seconds=COUNTED_SECONDS)
    return {"name": name, "at": at, "since": since, "edge": minute_edge(since)}


def counted_at_reserve(at: datetime) -> datetime:
    """The `counted_from` of a call reserved at `at` (runner.core.limits.counted_from); its
    settle sets it to the settle's time."""
    return counted_from(at, False, None)


def live_waiter(at: Any, graced: Any = None) -> Any:
    """A waiter's run is still coming back for its place: running now, or queued with a
    wake-up time no more than WAITER_GRACE_SECONDS ago (`graced`, if given: at less that)."""
    return exists().where(runs.c.id == limit_waiters.c.run_id, live_run(at, graced))


def live_run(at: Any, graced: Any = None) -> Any:
    """The run of `runs` is still coming back for its place in a line (see live_waiter).
    A statement built once binds `graced` (waiter_grace_from) rather than computing it."""
    if graced is None:
        graced = at - timedelta(seconds=WAITER_GRACE_SECONDS)
    return or_(
        runs.c.status == RunStatus.RUNNING,
        and_(
            runs.c.status == RunStatus.QUEUED,
            or_(runs.c.not_before.is_(None), runs.c.not_before >= graced),
        ),
    )


def waiter_grace_from(at: datetime) -> datetime:
    """The oldest wake-up time of a parked run still in line at `at` (for `graced`)."""
    return at - timedelta(seconds=WAITER_GRACE_SECONDS)


def list_limits(engine: Engine, at: datetime) -> list[LimitInfo]:
    """Every limit, by name, with what it has charged over the minute up to `at`."""
    found: list[LimitInfo] = []
    with reading(engine) as connection:
        rows = list(connection.execute(select(limits).order_by(limits.c.name)))
        for row in rows:
            charged = Charged.of(charges(connection, row.name, at))
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
                    tokens=charged.tokens,
                    requests=charged.requests,
                    in_flight=charged.in_flight,
                    waiting=int(waiting),
                    backoff_until=backoff if backoff is not None and backoff > at else None,
                )
            )
    return found


# -- sweeping ---------------------------------------------------------------------------------

_AT, _GRACED = bindparam("at", type_=Timestamp), bindparam("graced", type_=Timestamp)
# A limit's charges past their minutes (`old`: well before the minute, whatever the call's
# reservation: a call settled late counts from its settle), and the runs gone from its
# line. A call still in flight under a live lease stays, however old: it holds a slot of the
# concurrency (and its settle will count).
DROP_OLD = delete(limit_reservations).where(
    limit_reservations.c.limit_name == bindparam("name"),
    limit_reservations.c.counted_from < bindparam("old", type_=Timestamp),
    ~and_(limit_reservations.c.settled == false(), held_by_live_lease(_AT)),
)
# The sums of seconds past their minutes (PostgreSQL: sums_by_second).
DROP_OLD_SECONDS = delete(limit_seconds).where(
    limit_seconds.c.limit_name == bindparam("name"),
    limit_seconds.c.second < bindparam("old", type_=Timestamp),
)
DROP_GONE_WAITERS = delete(limit_waiters).where(
    limit_waiters.c.limit_name == bindparam("name"), ~live_waiter(_AT, _GRACED)
)
# How often this process deletes them (the reads above pass over both): a sweep was two
# round trips of every reservation.
SWEEP_SECONDS = 1.0
_SWEPT: dict[tuple[str, str], float] = {}


def sweep_due(database: str, name: str, every: float | None = None) -> bool:
    """Whether a reservation of limit `name` in `database` (its URL) sweeps it now: if this
    process last swept it `every` seconds ago or more (SWEEP_SECONDS unless given). Calls
    reserved alone and grants (runner.sql.grants) share the time of the last sweep."""
    every = SWEEP_SECONDS if every is None else every
    key = (database, name)
    now = time.monotonic()
    if now - _SWEPT.get(key, -every) < every:
        return False
    _SWEPT[key] = now
    return True


def sweep(connection: Connection, name: str, at: datetime) -> None:
    """Delete limit `name`'s charges past their minutes and the runs gone from its line (in
    the caller's transaction, the limit's row locked, `at` read under the lock)."""
    old = at - timedelta(seconds=2 * WINDOW_SECONDS)
    connection.execute(DROP_OLD, {"name": name, "old": old, "at": at})
    if backend_for(connection.dialect.name).sums_by_second:
        connection.execute(DROP_OLD_SECONDS, {"name": name, "old": old})
    connection.execute(DROP_GONE_WAITERS, {"name": name, "at": at, "graced": waiter_grace_from(at)})


# -- settling ---------------------------------------------------------------------------------

_r = limit_reservations.c
_RESERVATION = bindparam("reservation", type_=_r.id.type)
# A call's settle: its usage, and its minute from now (runner.core.limits.counted_from).
SETTLE = (
    update(limit_reservations)
    .where(_r.id == _RESERVATION)
    .values(
        tokens=bindparam("used", type_=_r.tokens.type),
        settled=true(),
        settled_at=_AT,
        counted_from=_AT,
    )
)


def settle_gone(
    reservation: Any, name: Any, run: Any, epoch: Any, used: Any, at: Any, gone: Any
) -> Any:
    """The INSERT of a call's settle whose row is `gone` (a condition): the call settled at
    `at`, under the lease that reserved it (its reservation's time went with its row: its
    `reserved_at` is the settle's). None if its limit was removed since (its charges went)."""
    columns = ["id", "limit_name", "run_id", "lease_epoch", "tokens", "settled"]
    columns += ["reserved_at", "settled_at", "counted_from"]
    values = select(reservation, limits.c.name, run, epoch, used, true(), at, at, at)
    return limit_reservations.insert().from_select(
        columns, values.where(limits.c.name == name, gone)
    )


SETTLE_GONE = settle_gone(
    _RESERVATION,
    bindparam("name", type_=_r.limit_name.type),
    bindparam("run", type_=_r.run_id.type),
    bindparam("epoch", type_=_r.lease_epoch.type),
    bindparam("used", type_=_r.tokens.type),
    _AT,
    ~exists().where(_r.id == _RESERVATION),
)


def settle_call(
    connection: Connection,
    name: str,
    reservation: str,
    used: int,
    at: datetime,
    *,
    run_id: str,
    epoch: int,
) -> None:
    """Settle a call of limit `name` at `used` tokens (in the caller's transaction); if the
    sweep took its row, write it anew (see the module's doc), under run `run_id`'s lease
    `epoch` that reserved it."""
    values = {"reservation": reservation, "used": used, "at": at}
    if not connection.execute(SETTLE, values).rowcount:
        gone = {**values, "name": name, "run": run_id, "epoch": epoch}
        connection.execute(SETTLE_GONE, gone)
