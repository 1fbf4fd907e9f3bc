"""A run's limit writes riding in its journal's commits: the settle of a model call in the
commit that records its output, the next call's reservation in the commit that records the
observation before it. A call reserved alone (a limit too small for grants, one with a
concurrency, or a busy one while runs wait in its line) then costs no commit of its own.

A call's reservation and settle were two commits more per model call (runner.sql.
reservations), where the step commits anyway right before the call (its observation) and
right after it (its action). So:

- A settle is noted (`settle_later`) and written by the run's next journal write, in its
  transaction, at that write's time: later than the call ended, so its minute starts no
  earlier than the provider's. Until then the call counts at its estimate, and against the
  concurrency while the lease lives, as a call in flight. A worker that dies first leaves
  it unsettled: it counts from its reservation plus the grace, as any call never settled.
- The next call's reservation is asked for (`want`) just before the write of the observation
  that the call follows, with the loop's estimate of what it will send; the write reserves
  it under the limit's row lock by the same rule as a reservation alone (runner.store.rules.
  Room: the minute's charges, the runs in line ahead, the concurrency, a Retry-After). If it
  does not fit, nothing is reserved and nobody is parked: the call reserves alone, which
  parks the run. A reservation so made is `ready` for the run's next call of that limit for
  READY_SECONDS (as a grant's calls: a worker killed before sending it leaves it counting
  whole from its reservation plus the grace, and a call sent from it left within
  READY_SECONDS); a call whose estimate it does not cover, or that comes later, reserves
  alone, and the one left over is deleted by the next write (no call was sent with it).
- A settle of a call under a concurrency also locks the limit's row, as a settle alone
  does; if runs wait in the limit's line, they are woken once the write has committed, in a
  transaction of the limit's row (runner.sql.limit_line.wake_line): either the settle is
  committed before a run parks (which then sees the slot free) or the run is in line when
  the settle looks.
- Only a limit whose last call this worker reserved alone is reserved ahead (`alone`, kept by
  runner.sql.reservations.SqlLimits): a busy one goes on with grants, and a write that finds
  a busy limit with nobody in line again reserves nothing, so its calls go back to them.
- What no write carried (the run stopped before its next call, or its lease ends) is written
  when its journal closes (`flush`); a reservation made ahead and not used is deleted then.

The statements run on the journal write's own cursor (runner.sql.driver), rendered once. On
PostgreSQL, whose round trips cost more than its statements, a write's one settle, or its one
reservation of the next call, goes in the fenced insert's own statement, as CTEs
(runner.sql.fencing, runner.sql.reserving), so the write stays one statement in autocommit;
a write that carries more, or sweeps the limit, runs these statements after its insert.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, and_, bindparam, case, delete, func, select
from sqlalchemy.engine import Dialect

from runner.core.clock import Clock, utc_now
from runner.core.limits import WINDOW_SECONDS, Reservation
from runner.sql import driver, grants
from runner.sql.backend import backend_for
from runner.sql.grants import size_of
from runner.sql.limit_line import wake_line
from runner.sql.limits import (
    DROP_GONE_WAITERS,
    DROP_OLD,
    DROP_OLD_SECONDS,
    SETTLE,
    SETTLE_GONE,
    bumped,
    counted_at_reserve,
    live_waiter,
    settle_call,
    sweep_due,
    totals,
    totals_bound,
    waiter_grace_from,
)
from runner.sql.reserving import reserving_values
from runner.sql.schema import Timestamp, limit_reservations, limit_waiters, limits
from runner.sql.writer import Writer
from runner.store.rules import Charged, Room

# How long after its reservation a reservation made in a journal write serves the run's next
# call (a killed worker's call must be sent within the grace its row counts for: as grants).
READY_SECONDS = 2.0
_BIGINT_MAX = 2**63 - 1

_r, _w, _l = limit_reservations.c, limit_waiters.c, limits.c
_AT = bindparam("at", type_=Timestamp)


def _limit_columns() -> tuple[Any, ...]:
    backing_off = case((_l.backoff_until > _AT, 1), else_=0)
    return (_l.tokens_per_minute, _l.requests_per_minute, _l.concurrency, backing_off)


def _lock_limit() -> Any:
    return select(*_limit_columns()).where(_l.name == bindparam("name")).with_for_update()


def _lock_limit_to_reserve() -> Any:
    """As `_lock_limit`, marking the row (runner.sql.limits.locked_to_reserve): PostgreSQL."""
    return bumped(_limit_columns())


def _line() -> Any:
    graced = bindparam("graced", type_=Timestamp)
    waiting = and_(_w.limit_name == bindparam("name"), live_waiter(_AT, graced))
    return select(_w.run_id).where(waiting).limit(1)


def _room(in_flight: bool, by_second: bool = False) -> Any:
    """What the minute charged (runner.sql.limits.totals), then the runs in line other than
    this one (how many, their tokens) and whether this one is: one round trip."""
    waiting = and_(
        _w.limit_name == bindparam("name"),
        live_waiter(_AT, bindparam("graced", type_=Timestamp)),
    )
    others = and_(waiting, _w.run_id != bindparam("run"))
    return totals(in_flight, by_second).add_columns(
        select(func.count()).select_from(limit_waiters).where(others).scalar_subquery(),
        select(func.coalesce(func.sum(_w.tokens), 0)).where(others).scalar_subquery(),
        select(func.count())
        .select_from(limit_waiters)
        .where(waiting, _w.run_id == bindparam("run"))
        .scalar_subquery(),
    )


def _reserve() -> Any:
    return limit_reservations.insert().values(
        id=bindparam("id"),
        limit_name=bindparam("name"),
        run_id=bindparam("run"),
        lease_epoch=bindparam("epoch"),
        tokens=bindparam("tokens"),
        settled=bindparam("settled"),
        reserved_at=_AT,
        counted_from=bindparam("counted_from", type_=Timestamp),
    )


def _drop() -> Any:
    return delete(limit_reservations).where(_r.id == bindparam("reservation"))


_STATEMENTS: dict[str, Callable[[], Any]] = {
    "lock_limit": _lock_limit,
    "lock_limit_to_reserve": _lock_limit_to_reserve,
    "line": _line,
    "reserve": _reserve,
    "settle": lambda: SETTLE,
    "settle_gone": lambda: SETTLE_GONE,
    "drop": _drop,
    "room": lambda: _room(False),
    "room_in_flight": lambda: _room(True),
    "room_by_second": lambda: _room(False, True),
    "room_in_flight_by_second": lambda: _room(True, True),
    "drop_old": lambda: DROP_OLD,
    "drop_old_seconds": lambda: DROP_OLD_SECONDS,
    "drop_gone_waiters": lambda: DROP_GONE_WAITERS,
}


# The values of each statement's literals (its anonymous binds: a sum's 0, a case's 1).
_LITERALS: WeakKeyDictionary[Dialect, dict[str, dict[str, Any]]] = WeakKeyDictionary()


def _literals(dialect: Dialect, name: str) -> dict[str, Any]:
    by_name = _LITERALS.setdefault(dialect, {})
    found = by_name.get(name)
    if found is None:
        compiled = _STATEMENTS[name]().compile(dialect=dialect)
        found = by_name[name] = {
            key: bind.value for key, bind in compiled.binds.items() if not bind.required
        }
    return found


# The statements that return rows (the others change them).
_READS = frozenset(
    {
        "lock_limit",
        "lock_limit_to_reserve",
        "line",
        "room",
        "room_in_flight",
        "room_by_second",
        "room_in_flight_by_second",
    }
)


def _run(
    write: driver.Statements, dialect: Dialect, name: str, values: dict[str, Any]
) -> list[Any]:
    """Statement `name` of this module on the write's cursor; the rows it returned."""
    statement = driver.prepared(dialect, ("limit_rides", name), _STATEMENTS[name])
    parameters = statement.parameters({**_literals(dialect, name), **values})
    if name in _READS:
        return list(write.rows(statement.sql, parameters))
    write.execute(statement.sql, parameters)
    return []


def _changed(write: driver.Statements, dialect: Dialect, name: str, values: dict[str, Any]) -> int:
    """Statement `name` of this module on the write's cursor; how many rows it changed."""
    statement = driver.prepared(dialect, ("limit_rides", name), _STATEMENTS[name])
    return write.count(statement.sql, statement.parameters({**_literals(dialect, name), **values}))


@dataclass(frozen=True)
class Settle:
    """A call's settle, noted until the run's next write."""

    limit: str
    reservation: str
    used: int
    wakes: bool  # the limit had a concurrency when reserved: lock its row, wake its line


@dataclass(frozen=True)
class Wanted:
    """The reservation the run's next call wants, of `tokens` from `limit`."""

    limit: str
    tokens: int
    grants_may: bool  # the worker would ask for a grant of the limit now


@dataclass(frozen=True)
class Ready:
    """A reservation made in a journal write, for the run's next call of its limit."""

    reservation: Reservation
    at: datetime  # when it was reserved (the store's clock)
    concurrency: bool  # the limit had one: the call's settle wakes its line


@dataclass
class Ride:
    """What one journal write carries for its run's limits, and what came of it (read only
    once the write has committed)."""

    run_id: str
    epoch: int
    clock: Clock
    dialect: Dialect
    database: str  # the database's URL, which a limit's sweeps are timed by
    settles: tuple[Settle, ...] = ()
    drops: tuple[str, ...] = ()  # reservations made ahead and not used: no call was sent
    wanted: Wanted | None = None
    reserved: Ready | None = None
    wakes: set[str] = field(default_factory=set)  # limits whose line waits for a slot
    grantable: bool = False  # the wanted limit would give this worker a grant now
    # It goes in the write's fenced insert, as CTEs (runner.sql.fencing, runner.sql.
    # reserving): its one settle, or its one reservation.
    in_insert: bool = False
    # The reservation the fenced insert's statement makes, if it makes one (`one_reserve`).
    in_statement: Ready | None = None
    # The limit is due a sweep (runner.sql.limits.sweep_due said so): the write sweeps it in
    # its own statements, before it reserves.
    sweeping: bool = False

    def one_settle(self) -> tuple[str, str, int, bool] | None:
        """The ride's limit, reservation, usage and whether its limit had a concurrency (its
        line to look at) if it is one settle alone: what a backend that `settles_in_insert`
        writes in the entry's statement."""
        if len(self.settles) != 1 or self.drops or self.wanted is not None:
            return None
        settle = self.settles[0]
        return settle.limit, settle.reservation, settle.used, settle.wakes

    def one_reserve(self, at: datetime) -> dict[str, Any] | None:
        """The values of the reservation that a backend that `reserves_in_insert` makes in
        the entry's statement (runner.sql.reserving), if the ride is one reservation alone
        and its limit is due no sweep; `at`: the write's time."""
        wanted, self.in_statement = self.wanted, None
        if wanted is None or self.settles or self.drops:
            return None
        if self.sweeping or sweep_due(self.database, wanted.limit):
            self.sweeping = True  # in this write's own statements, however often it is tried
            return None
        reservation = Reservation(wanted.limit, uuid.uuid4().hex, wanted.tokens)
        assert reservation.id is not None
        self.in_statement = Ready(reservation, at, False)
        # runner.sql.grants.size_of's block of tokens, read now (a benchmark changes it).
        grant_tokens = wanted.tokens * grants.GRANT_LEAST_CALLS * grants.GRANT_SHARE
        return reserving_values(
            wanted.limit,
            reservation.id,
            self.run_id,
            self.epoch,
            wanted.tokens,
            at,
            wanted.grants_may,
            min(grants.GRANT_FROM_REQUESTS, _BIGINT_MAX),
            min(grant_tokens, _BIGINT_MAX),
            waiter_grace_from(at),
        )

    def returned(self, found: Sequence[Any]) -> None:
        """What the fenced insert's statement returned of the ride (`in_insert`): whether it
        reserved, for a reservation; whether to wake the limit's line, for a settle."""
        self.reserved, self.wakes, self.grantable = None, set(), False
        made = self.in_statement
        if made is not None:
            reserved, concurrency, grantable = found
            if reserved:
                self.reserved = Ready(made.reservation, made.at, bool(concurrency))
            self.grantable = bool(grantable) and not reserved
        elif found and found[0]:
            self.wakes.add(self.settles[0].limit)

    def run(self, write: driver.Statements) -> None:
        """The ride's statements in the journal write's transaction (after its fence held).
        Run again from the start if the write is tried again."""
        self.reserved, self.wakes, self.grantable = None, set(), False
        if self.settles:
            at = utc_now(self.clock)
            for settle in self.settles:
                if settle.wakes:
                    self._run(write, "lock_limit", {"name": settle.limit, "at": at})
                values = {"reservation": settle.reservation, "used": settle.used, "at": at}
                if not _changed(write, self.dialect, "settle", values):  # the sweep took it
                    lease = {"name": settle.limit, "run": self.run_id, "epoch": self.epoch}
                    self._run(write, "settle_gone", {**values, **lease})
                if settle.wakes:
                    line = {"name": settle.limit, "at": at, "graced": waiter_grace_from(at)}
                    if self._run(write, "line", line):
                        self.wakes.add(settle.limit)
        for reservation in self.drops:
            self._run(write, "drop", {"reservation": reservation})
        if self.wanted is not None:
            self.reserved = self._reserve(write, self.wanted)

    def _run(self, write: driver.Statements, name: str, values: dict[str, Any]) -> list[Any]:
        return _run(write, self.dialect, name, values)

    def _reserve(self, write: driver.Statements, wanted: Wanted) -> Ready | None:
        """The wanted reservation if it fits now, by a reservation alone's rule
        (runner.sql.reservations._reserve); None if not: the call will reserve alone."""
        name = wanted.limit
        backend = backend_for(self.dialect.name)
        lock = "lock_limit_to_reserve" if backend.reserves_in_insert else "lock_limit"
        locked = self._run(write, lock, {"name": name, "limit": name, "at": utc_now(self.clock)})
        if not locked or locked[0][3]:
            return None  # not set (any more), or a Retry-After holds it back
        tokens_per_minute, requests_per_minute, concurrency, _ = locked[0]
        limit = {
            "tokens_per_minute": tokens_per_minute,
            "requests_per_minute": requests_per_minute,
            "concurrency": concurrency,
            "backoff_until": None,
        }
        at = utc_now(self.clock)  # read under the lock: every reservation of the limit in order
        graced = waiter_grace_from(at)
        if self.sweeping or sweep_due(self.database, name):
            old = at - timedelta(seconds=2 * WINDOW_SECONDS)
            self._run(write, "drop_old", {"name": name, "old": old, "at": at})
            if backend.sums_by_second:
                self._run(write, "drop_old_seconds", {"name": name, "old": old})
            self._run(write, "drop_gone_waiters", {"name": name, "at": at, "graced": graced})
        bound = {**totals_bound(name, at), "graced": graced, "run": self.run_id}
        room = "room" if concurrency is None else "room_in_flight"
        [found] = self._run(write, room + ("_by_second" if backend.sums_by_second else ""), bound)
        tokens, requests, flying, others, others_tokens, in_line = map(int, found)
        if in_line:
            return None  # in line itself: its place is taken up by a reservation alone
        # The runs ahead (all in line: this one is not), as Room counts them: their number
        # and their tokens' sum.
        ahead = [others_tokens, *[0] * (others - 1)] if others else []
        grant = wanted.grants_may and not others
        if grant and size_of(SimpleNamespace(**limit), wanted.tokens) is not None:
            # A busy limit with nobody in line again: its calls go back to grants.
            self.grantable = True
            return None
        charged = Charged(tokens, requests, flying, lambda: ())
        if not Room(limit, at, charged, ahead, wanted.tokens).fits():
            return None
        reservation = Reservation(name, uuid.uuid4().hex, wanted.tokens)
        values = {
            "id": reservation.id,
            "name": name,
            "run": self.run_id,
            "epoch": self.epoch,
            "tokens": wanted.tokens,
            "settled": False,
            "at": at,
            "counted_from": counted_at_reserve(at),
        }
        self._run(write, "reserve", values)
        return Ready(reservation, at, concurrency is not None)


class Riders:
    """One run's limit writes waiting for its next journal write (under one lease): shared by
    its journal (runner.sql.journal), which carries them, and its limits
    (runner.sql.reservations.SqlLimits), which note them."""

    def __init__(
        self, run_id: str, epoch: int, writer: Writer, clock: Clock, alone: set[str]
    ) -> None:
        self.run_id, self.epoch, self.writer, self.clock = run_id, epoch, writer, clock
        # The limits whose calls this worker reserves alone (no grant): shared by its runs.
        self.alone = alone
        self._lock = threading.Lock()
        self._settles: list[Settle] = []
        self._drops: list[str] = []
        self._wanted: Wanted | None = None
        self._ready: Ready | None = None
        # The database's URL as text, made at the first write that carries anything: a
        # URL renders itself anew each time (about 8 us, twice a step of a call reserved alone).
        self._database: str | None = None

    # -- what the limits note ---------------------------------------------------------------

    def settle_later(self, limit: str, reservation: str, used: int, *, wakes: bool) -> None:
        """Settle `reservation` at `used` tokens in the run's next write (`wakes`: the limit
        had a concurrency when it was reserved)."""
        with self._lock:
            self._settles.append(Settle(limit, reservation, used, wakes))

    def want(self, limit: str, tokens: int, *, grants_may: bool) -> None:
        """Reserve `tokens` of `limit` for the run's next call in its next journal write
        (`grants_may`: unless the limit would give a grant now: the call takes one)."""
        with self._lock:
            self._wanted = Wanted(limit, tokens, grants_may)

    def has_ready(self) -> bool:
        return self._ready is not None

    def ready(self, limit: str, tokens: int) -> tuple[Reservation, bool] | None:
        """The reservation made ahead for this call, if it is of `limit`, covers `tokens`
        and is recent enough, and whether its limit has a concurrency; one that is not is
        dropped (by the next write)."""
        with self._lock:
            ready, self._ready = self._ready, None
            if ready is None:
                return None
            reservation = ready.reservation
            age = utc_now(self.clock) - ready.at
            if (
                reservation.limit == limit
                and tokens <= reservation.tokens
                and timedelta(0) <= age < timedelta(seconds=READY_SECONDS)
            ):
                return reservation, ready.concurrency
            assert reservation.id is not None
            self._drops.append(reservation.id)
            return None

    # -- what the journal carries -----------------------------------------------------------

    def take(self) -> Ride | None:
        """What the run's next journal write carries (None: nothing)."""
        with self._lock:
            if not self._settles and not self._drops and self._wanted is None:
                return None
            drops = tuple(self._drops)
            if self._wanted is not None and self._ready is not None:
                # Asked for anew: the one made before serves no call now.
                assert self._ready.reservation.id is not None
                drops += (self._ready.reservation.id,)
                self._ready = None
            engine = self.writer.engine
            if self._database is None:
                self._database = str(engine.url)
            ride = Ride(
                self.run_id,
                self.epoch,
                self.clock,
                engine.dialect,
                self._database,
                tuple(self._settles),
                drops,
                self._wanted,
            )
            self._settles, self._drops, self._wanted = [], [], None
            return ride

    def done(self, ride: Ride) -> None:
        """`ride`'s write committed: its reservation is ready, its lines are woken."""
        if ride.reserved is not None:
            with self._lock:
                self._ready = ride.reserved
        if ride.grantable and ride.wanted is not None:
            self.alone.discard(ride.wanted.limit)
        for limit in sorted(ride.wakes):
            self._wake(limit)

    def undo(self, ride: Ride) -> None:
        """`ride`'s write failed: its settles and drops wait for the next write (what it
        reserved, if its commit did happen, counts until its minute is over)."""
        with self._lock:
            self._settles[:0] = ride.settles
            self._drops[:0] = ride.drops

    def flush_into(self, connection: Connection) -> set[str]:
        """Write what waits in `connection`'s transaction (a reservation alone's); the
        limits whose lines to wake once it has committed (`wake`)."""
        with self._lock:
            settles, drops = self._settles, self._drops
            self._settles, self._drops = [], []
        wakes: set[str] = set()
        if not settles and not drops:
            return wakes
        at = utc_now(self.clock)
        for settle in settles:
            if settle.wakes:
                connection.execute(select(_l.name).where(_l.name == settle.limit).with_for_update())
            # Written by a worker fenced out too (its write refused): the usage only.
            settle_call(
                connection,
                settle.limit,
                settle.reservation,
                settle.used,
                at,
                run_id=self.run_id,
                epoch=self.epoch,
            )
            if settle.wakes:
                wakes.add(settle.limit)
        for reservation in drops:
            connection.execute(_drop(), {"reservation": reservation})
        return wakes

    def flush(self) -> None:
        """Write what waits now, in a transaction of its own (the run's lease ends, or no
        journal write follows), and give back a reservation made ahead and not used."""
        with self._lock:
            if self._ready is not None:
                assert self._ready.reservation.id is not None
                self._drops.append(self._ready.reservation.id)
                self._ready = None
            self._wanted = None
            if not self._settles and not self._drops:
                return
        with self.writer.turn() as connection, connection.begin():
            wakes = self.flush_into(connection)
        for limit in sorted(wakes):
            self._wake(limit)

    def wake(self, limits_: Iterable[str]) -> None:
        for limit in sorted(limits_):
            self._wake(limit)

    def _wake(self, limit: str) -> None:
        """Wake `limit`'s line (a settle freed a slot): in a transaction of the limit's row."""
        with self.writer.turn() as connection, connection.begin():
            row = connection.execute(
                select(limits).where(_l.name == limit).with_for_update()
            ).first()
            if row is not None and row.concurrency is not None:
                wake_line(connection, row, utc_now(self.clock))
