"""A run's limit writes in its journal write's one statement, on PostgreSQL: the reservation
of its next model call, and the settle of a call under a concurrency.

A journal write that reserves its run's next call (runner.sql.limit_rides) was a transaction
of six round trips: BEGIN, the fenced insert, the limit's row locked, the minute and the line
read, the reservation inserted, COMMIT; and the write that settles a call under a
concurrency six too (the lock, the settle, a look at the line). Each becomes CTEs of the
fenced insert, which stays one statement in autocommit.

What one statement cannot do under READ COMMITTED is read after its lock: it reads every
table as of its start, so a reservation committed while it waited for the limit's row would
go unseen. So the statement reads the minute, the line and the row's `changes` (revision
0025) as of its start, then locks the row by an UPDATE that bumps `changes` only if it is
still the count it read: PostgreSQL checks an UPDATE's condition again on the row's newest
version once the lock is its. Every transaction that reserves from the limit or parks a
run in its line bumps the count under the lock (runner.sql.limits.locked_to_reserve), so a
count unchanged means nothing was reserved between the read and the lock. If it changed,
nothing is reserved and the call reserves alone, as when the call does not fit. The limit's
numbers and its Retry-After are checked in the UPDATE's condition too: its newest values.

A settle under a concurrency locks the row (FOR UPDATE, which reads the newest version) so
that a run parking for a slot at the same moment sees the call settled, or is seen in line.
In one statement the line is read as of its start: if the row's count changed by the time
the lock was taken (a run parked meanwhile), or a run waits in line, the line is woken after
the write, in a transaction of its own, as before.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.sql.selectable import CTE

from runner.core.limits import COUNTED_SECONDS
from runner.sql.limits import (
    counted_at_reserve,
    held_by_live_lease,
    live_waiter,
    minute_charged,
    minute_edge,
)
from runner.sql.schema import Timestamp, limit_reservations, limit_waiters, limits

_l, _r, _w = limits.c, limit_reservations.c, limit_waiters.c
_flying = limit_reservations.alias("ride_flying")
_GRANT_FROM = bindparam("ride_grant_from", type_=BigInteger())
_GRANT_TOKENS = bindparam("ride_grant_tokens", type_=BigInteger())


def _binds() -> dict[str, Any]:
    return {
        "name": bindparam("ride_limit", type_=_l.name.type),
        "at": bindparam("ride_at", type_=Timestamp),
        "since": bindparam("ride_since", type_=Timestamp),
        "edge": bindparam("ride_edge", type_=Timestamp),
        "graced": bindparam("ride_graced", type_=Timestamp),
        "run": bindparam("ride_run", type_=_r.run_id.type),
    }


def _grantable(
    tokens_per_minute: Any, requests_per_minute: Any, concurrency: Any, others: Any
) -> Any:
    """runner.sql.grants.size_of says yes, with nobody in line and grants wanted: the limit
    is busy again, its calls go back to grants (`tpm // share >= tokens * least` written as
    `tpm >= tokens * least * share`, the same for whole numbers)."""
    return and_(
        bindparam("ride_grants_may", type_=Boolean()),
        others == 0,
        concurrency.is_(None),
        or_(requests_per_minute.is_(None), requests_per_minute >= _GRANT_FROM),
        or_(tokens_per_minute.is_(None), tokens_per_minute >= _GRANT_TOKENS),
    )


def reserving(fenced: CTE) -> tuple[list[CTE], list[Any]]:
    """The CTEs that reserve the run's next call in the fenced insert's statement (once the
    `fenced` CTE has fenced the run), and what the insert returns of them: how many rows it
    reserved (0 or 1), whether the limit has a concurrency, and whether it would give a
    grant now."""
    b = _binds()
    name, at = b["name"], b["at"]
    seen = (
        select(
            _l.changes,
            _l.tokens_per_minute,
            _l.requests_per_minute,
            _l.concurrency,
            _l.backoff_until,
        )
        .where(_l.name == name)
        .cte("ride_seen")
    )
    # By the second (revision 0026): PostgreSQL is the only database this statement runs on.
    minute = minute_charged(name, b["since"], b["edge"], by_second=True).cte("ride_minute")
    in_flight = (
        select(func.count())
        .select_from(_flying)
        .where(
            _flying.c.limit_name == name,
            _flying.c.settled == false(),  # the partial index's predicate, as written
            held_by_live_lease(at, _flying),
        )
        .scalar_subquery()
    )
    flying = select(case((seen.c.concurrency.is_(None), 0), else_=in_flight).label("calls")).cte(
        "ride_in_flight"
    )
    waiting = and_(_w.limit_name == name, live_waiter(at, b["graced"]))
    others = _w.run_id != b["run"]
    line = (
        select(
            func.count().filter(others).label("others"),
            func.coalesce(func.sum(_w.tokens).filter(others), 0).label("tokens"),
            func.count().filter(_w.run_id == b["run"]).label("mine"),
        )
        .where(waiting)
        .cte("ride_line")
    )
    tokens = bindparam("ride_tokens", type_=_r.tokens.type)
    used = minute.c.tokens + line.c.tokens
    # runner.store.rules.Room.fits, on the row's newest numbers.
    fits = and_(
        or_(_l.tokens_per_minute.is_(None), used == 0, used + tokens <= _l.tokens_per_minute),
        or_(
            _l.requests_per_minute.is_(None),
            minute.c.calls + line.c.others + 1 <= _l.requests_per_minute,
        ),
        or_(_l.concurrency.is_(None), flying.c.calls + 1 <= _l.concurrency),
        or_(_l.backoff_until.is_(None), _l.backoff_until <= at),
    )
    locked = (
        update(limits)
        .where(
            _l.name == name,
            _l.changes == seen.c.changes,  # nobody reserved since the read
            exists(select(fenced.c.cancel_requested)),  # the run's lease is still this worker's
            line.c.mine == 0,  # in line itself: its place is taken up by a reservation alone
            fits,
            ~_grantable(
                _l.tokens_per_minute, _l.requests_per_minute, _l.concurrency, line.c.others
            ),
        )
        .values(changes=_l.changes + 1)
        .returning(_l.name, _l.concurrency)
        .cte("ride_locked")
    )
    row = select(
        bindparam("ride_id", type_=_r.id.type),
        locked.c.name,
        b["run"],
        bindparam("ride_epoch", type_=_r.lease_epoch.type),
        tokens,
        false(),
        at,
        bindparam("ride_counted_from", type_=Timestamp),
    )
    columns = ["id", "limit_name", "run_id", "lease_epoch", "tokens", "settled"]
    reserved = (
        insert(limit_reservations)
        .from_select([*columns, "reserved_at", "counted_from"], row)
        .returning(_r.id)
        .cte("ride_reserved")
    )
    # As the ride's `_reserve` finds it: not in line, no Retry-After.
    grantable = select(
        and_(
            _grantable(
                seen.c.tokens_per_minute,
                seen.c.requests_per_minute,
                seen.c.concurrency,
                line.c.others,
            ),
            line.c.mine == 0,
            or_(seen.c.backoff_until.is_(None), seen.c.backoff_until <= at),
        )
    ).scalar_subquery()
    returned = [
        select(func.count()).select_from(reserved).scalar_subquery(),
        select(locked.c.concurrency.is_not(None)).scalar_subquery(),
        grantable,
    ]
    return [seen, minute, flying, line, locked, reserved], returned


def reserving_values(
    name: str,
    reservation: str,
    run_id: str,
    epoch: int,
    tokens: int,
    at: datetime,
    grants_may: bool,
    grant_from: int,
    grant_tokens: int,
    graced: datetime,
) -> dict[str, Any]:
    """The values of `reserving`'s binds."""
    since = at - timedelta(seconds=COUNTED_SECONDS)
    return {
        "ride_limit": name,
        "ride_id": reservation,
        "ride_run": run_id,
        "ride_epoch": epoch,
        "ride_tokens": tokens,
        "ride_at": at,
        "ride_since": since,
        "ride_edge": minute_edge(since),
        "ride_graced": graced,
        "ride_counted_from": counted_at_reserve(at),
        "ride_grants_may": grants_may,
        "ride_grant_from": grant_from,
        "ride_grant_tokens": grant_tokens,
    }


def settle_checked(name: Any, at: Any, graced: Any) -> list[Any]:
    """What the fenced insert that settles a call under a concurrency returns besides, for
    its line: whether to wake it after the write (a run waits in line, or the row's count
    changed between the statement's start and its lock: a run may have parked meanwhile).
    The row's lock is taken by the FOR UPDATE, which returns its newest version."""
    seen = select(_l.changes).where(_l.name == name).cte("ride_seen")
    locked = select(_l.changes).where(_l.name == name).with_for_update().cte("ride_locked")
    waiting = exists().where(_w.limit_name == name, live_waiter(at, graced))
    changed = exists().where(locked.c.changes != seen.c.changes)
    return [select(or_(changed, waiting)).scalar_subquery()]
