"""Reserving from a limit before a model call, settling after, and parking a run that must
wait: `SqlLimits`, the store's side of the loop's `Limits` protocol (runner.core.limits).

A reservation is one transaction with the limit's row locked (FOR UPDATE on PostgreSQL;
BEGIN IMMEDIATE on SQLite): two workers racing for the last tokens are served one after the
other, and the second sees the first's charge. It fits when the limit's charge over the
last minute (runner.sql.limits.charges) plus the estimates of the runs ahead of it in line
plus its own stays within tokens and requests per minute, its calls in flight within the
concurrency, and no shared Retry-After holds the limit back.

Fairness: first come, first served by the time a run began to wait. A run that finds no
room takes a place in line (`limit_waiters`, since then) and every later reservation leaves
room for the estimates of the runs ahead of it, whatever their queue or priority: a run
waits at most for those before it, never for ever. A call larger than a whole minute's
tokens goes through alone, when nothing else is charged, rather than never.

A run without room is parked in the same transaction: queued again with `not_before` at the
moment its call would fit (when enough of the minute's charges age out, or the Retry-After
ends), its lease let go (no slot, no connection, no polling of its own), and RunParked is
raised. Its next claim resumes it from its journal and reserves again.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, bindparam, case, delete, select, update

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.limits import (
    Estimate,
    Reservation,
    estimated,
)
from runner.core.status import RunStatus
from runner.errors import LeaseLost, RunParked
from runner.sql.grants import Grants
from runner.sql.limit_line import wake_line
from runner.sql.limit_rides import Riders
from runner.sql.limits import (
    charged,
    counted_at_reserve,
    live_waiter,
    locked_to_reserve,
    settle_call,
    sweep,
    sweep_due,
    waiter_grace_from,
)
from runner.sql.runs import reading
from runner.sql.schema import Timestamp, limit_reservations, limit_waiters, limits, runs
from runner.sql.writer import Writer
from runner.store.rows import COUNTER_MAX
from runner.store.rules import Room, aware

_IS_SET = select(limits.c.name).where(limits.c.name == bindparam("name"))
_LIMIT_ROW = select(limits).where(limits.c.name == bindparam("name"))
# The statements of a reservation and a settle, built once: building them again for every
# call cost more CPU than the database's work (issue 39's profile).
_LOCKED_LIMIT = _LIMIT_ROW.with_for_update()
_w = limit_waiters.c
_AT, _GRACED = bindparam("at", type_=Timestamp), bindparam("graced", type_=Timestamp)
# The limit's line, in no order: a run finds its own place in it, and those ahead.
_LINE = select(_w.run_id, _w.waiting_since, _w.tokens).where(
    _w.limit_name == bindparam("name"), live_waiter(_AT, _GRACED)
)
_RESERVE = limit_reservations.insert()
_LEAVE_LINE = delete(limit_waiters).where(
    _w.limit_name == bindparam("name"), _w.run_id == bindparam("run")
)


class SqlLimits:
    """One run's reservations, under the lease of `epoch` (runner.core.limits.Limits)."""

    def __init__(
        self,
        engine: Engine,
        run_id: str,
        epoch: int,
        *,
        writer: Writer,
        clock: Clock = SYSTEM,
        grants: Grants | None = None,
        riders: Riders | None = None,
    ) -> None:
        self.engine, self.run_id, self.epoch = engine, run_id, epoch
        self.writer, self.clock, self.grants = writer, clock, grants
        # The run's journal writes, which carry its settles and reserve its next call ahead
        # (runner.sql.limit_rides); None: each is a transaction of its own.
        self.riders = riders
        # Reservations of a limit with no concurrency when reserved: no line waits on their
        # settle, which needs no lock of the limit's row nor look at its line.
        self._no_line: set[str] = set()

    def reserve(self, limit: str, estimate: Estimate) -> Reservation:
        riders, grants = self.riders, self.grants
        if riders is not None and riders.has_ready():  # reserved in the step's last write
            tokens = min(max(estimated(estimate), 0), COUNTER_MAX)
            ready = riders.ready(limit, tokens)
            if ready is not None:
                reservation, concurrency = ready
                if not concurrency:
                    self._no_line.add(reservation.id or "")
                return reservation
        if grants is not None and grants.holds(limit):  # a busy limit: from memory
            tokens = min(max(estimated(estimate), 0), COUNTER_MAX)
            handed = grants.hand_out(limit, self.run_id, self.epoch, tokens)
            if handed is not None:
                grants.alone.discard(limit)
                return handed
        # An adapter draws from `provider/model` by default, set or not: a limit that is not
        # set costs a plain read, never SQLite's write lock (nor the estimate).
        with reading(self.engine) as connection:
            row = connection.execute(_LIMIT_ROW, {"name": limit}).first()
        if row is None:
            return Reservation(limit, None, estimate if isinstance(estimate, int) else 0)
        tokens = min(max(estimated(estimate), 0), COUNTER_MAX)
        if grants is not None:
            handed = grants.take(row, self.run_id, self.epoch, tokens)
            if handed is not None:
                grants.alone.discard(limit)
                return handed
            grants.alone.add(limit)  # its next calls are reserved in the run's writes
        wakes: set[str] = set()
        with self.writer.turn() as connection, connection.begin():
            if riders is not None:  # what waits for the run's next write goes in this one
                wakes = riders.flush_into(connection)
            decided = _reserve(connection, self.run_id, self.epoch, limit, tokens, self.clock)
        if riders is not None and wakes:
            riders.wake(wakes)
        if isinstance(decided, Reservation):
            if row.concurrency is None and decided.id is not None:
                self._no_line.add(decided.id)
            return decided
        raise RunParked(
            f"run {self.run_id} waits for limit {limit} until {decided:%H:%M:%S.%f} UTC",
            run_id=self.run_id,
            limit=limit,
            until=decided.timestamp(),
        )

    def settle(self, reservation: Reservation, tokens: int) -> None:
        if reservation.id is None:
            return
        if self.grants is not None and self.grants.settle(reservation, tokens):
            return  # a call of a grant: settled with the grant's others
        used = min(max(tokens, 0), COUNTER_MAX)
        # A worker fenced out settles too (the provider charged the call), its row written
        # anew if the sweep took it: a settled call holds no slot, and the run is not touched.
        name, run_id, epoch = reservation.limit, self.run_id, self.epoch
        if reservation.id in self._no_line:
            self._no_line.discard(reservation.id)
            with self.writer.turn() as connection, connection.begin():
                at = utc_now(self.clock)
                settle_call(connection, name, reservation.id, used, at, run_id=run_id, epoch=epoch)
            return
        with self.writer.turn() as connection, connection.begin():
            # The limit's row first, locked as a reservation locks it: a run parking for a
            # slot at this moment either sees this call settled or is woken below.
            limit = connection.execute(_LOCKED_LIMIT, {"name": reservation.limit}).first()
            at = utc_now(self.clock)
            settle_call(connection, name, reservation.id, used, at, run_id=run_id, epoch=epoch)
            if limit is not None and limit.concurrency is not None:
                wake_line(connection, limit, at)

    def settle_later(self, reservation: Reservation, tokens: int) -> None:
        """As `settle`, for a call whose output the run's next journal write records: the
        settle goes in that write's transaction (runner.sql.limit_rides)."""
        riders = self.riders
        if reservation.id is None or riders is None:
            self.settle(reservation, tokens)
            return
        if self.grants is not None and self.grants.settle(reservation, tokens):
            return  # a call of a grant: settled with the grant's others
        used = min(max(tokens, 0), COUNTER_MAX)
        wakes = reservation.id not in self._no_line
        self._no_line.discard(reservation.id)
        riders.settle_later(reservation.limit, reservation.id, used, wakes=wakes)

    def reserve_ahead(self, limit: str, estimate: Estimate) -> None:
        """The run's next call will reserve about `estimate` tokens of `limit` right after
        its next journal write: reserve it in that write, if this worker reserves that
        limit's calls alone (no grant), so that the call costs no commit of its own."""
        riders, grants = self.riders, self.grants
        if riders is None or grants is None or limit not in grants.alone:
            return
        tokens = min(max(estimated(estimate), 0), COUNTER_MAX)
        riders.want(limit, tokens, grants_may=not grants.refusing(limit))

    def back_off(self, limit: str, seconds: float) -> None:
        until = utc_now(self.clock) + timedelta(seconds=max(seconds, 0.0))
        if self.grants is not None:
            self.grants.close_limit(limit)
        with self.writer.turn() as connection, connection.begin():
            connection.execute(
                update(limits)
                .where(
                    limits.c.name == limit,
                    limits.c.backoff_until.is_(None) | (limits.c.backoff_until < until),
                )
                .values(backoff_until=until)
            )


def _reserve(
    connection: Connection,
    run_id: str,
    epoch: int,
    name: str,
    tokens: int,
    clock: Clock,
    *,
    park: bool = True,
) -> Reservation | datetime:
    """The reservation, or the time the run is parked until (in the caller's transaction).
    Not `park`: nothing is parked nor put in line, the time it would fit is returned."""
    limit = locked_to_reserve(connection, name)
    if limit is None:
        return Reservation(name, None, tokens)  # not set: the calls draw from nothing
    at = utc_now(clock)  # read under the lock: every reservation of the limit in order
    bound = {"name": name, "run": run_id, "at": at, "graced": waiter_grace_from(at)}
    # The minute's charges are all this needs: older rows go, so the table stays small.
    # And the line keeps only runs still coming back: one that finished while parked (a
    # cancel), or never came back past its grace, goes (it queues again if it returns).
    # Both only now and then: the reads below pass over what they would delete.
    if sweep_due(str(connection.engine.url), name):
        sweep(connection, name, at)
    totals = charged(connection, name, at, in_flight=limit.concurrency is not None)
    line = connection.execute(_LINE, bound).all()
    mine = next((waiter for waiter in line if waiter.run_id == run_id), None)
    ahead = [
        int(waiter.tokens)
        for waiter in line
        if waiter.run_id != run_id
        and (mine is None or (waiter.waiting_since, waiter.run_id) < (mine.waiting_since, run_id))
    ]
    room = Room(limit._mapping, at, totals, ahead, tokens)
    if room.fits():
        reservation_id = uuid.uuid4().hex
        connection.execute(
            _RESERVE,
            {
                "id": reservation_id,
                "limit_name": name,
                "run_id": run_id,
                "lease_epoch": epoch,
                "tokens": tokens,
                "settled": False,
                "reserved_at": at,
                "counted_from": counted_at_reserve(at),
            },
        )
        waited = 0.0
        if mine is not None:
            connection.execute(_LEAVE_LINE, bound)
            waited = max((at - aware(mine.waiting_since)).total_seconds(), 0.0)
        return Reservation(name, reservation_id, tokens, waited)
    until = room.wake_at()
    if not park:
        return until
    if mine is None:
        connection.execute(
            limit_waiters.insert().values(
                limit_name=name, run_id=run_id, tokens=tokens, waiting_since=at
            )
        )
    else:
        connection.execute(
            update(limit_waiters)
            .where(_w.limit_name == name, _w.run_id == run_id)
            .values(tokens=tokens)
        )
    parked = connection.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.lease_epoch == epoch, runs.c.status == RunStatus.RUNNING)
        .values(
            status=RunStatus.QUEUED,
            lease_owner=None,
            lease_expires_at=None,
            # A cancel that came since the run's last check is heard at its next claim, now:
            # parked until its wake-up (up to a minute), it would stay unfinished that long.
            not_before=case((runs.c.cancel_requested.is_(True), at), else_=until),
            updated_at=at,
        )
    ).rowcount
    if not parked:
        raise LeaseLost(f"run {run_id} was taken over by another worker")
    return until


class ScorerLimits:
    """The reservations of a finished run's scorers (a model-judged scorer's calls): as a
    run's, but a call without room waits here for it (a scorer holds no run to park) and
    takes no place in line: runs waiting in line go first."""

    def __init__(self, engine: Engine, run_id: str, *, writer: Writer, clock: Clock = SYSTEM):
        self.run = SqlLimits(engine, run_id, 0, writer=writer, clock=clock)

    def reserve(self, limit: str, estimate: Estimate) -> Reservation:
        run = self.run
        with reading(run.engine) as connection:
            if connection.execute(_IS_SET, {"name": limit}).first() is None:
                return Reservation(limit, None, estimate if isinstance(estimate, int) else 0)
        tokens = min(max(estimated(estimate), 0), COUNTER_MAX)
        waited = 0.0
        while True:
            with run.writer.turn() as connection, connection.begin():
                decided = _reserve(connection, run.run_id, 0, limit, tokens, run.clock, park=False)
            if isinstance(decided, Reservation):
                return Reservation(decided.limit, decided.id, decided.tokens, waited)
            pause = max((decided - utc_now(run.clock)).total_seconds(), 0.01)
            run.clock.sleep(pause)
            waited += pause

    def settle(self, reservation: Reservation, tokens: int) -> None:
        self.run.settle(reservation, tokens)

    def back_off(self, limit: str, seconds: float) -> None:
        self.run.back_off(limit, seconds)
