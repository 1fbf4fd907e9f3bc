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
    WINDOW_SECONDS,
    Estimate,
    Reservation,
    estimated,
)
from runner.core.status import RunStatus
from runner.errors import LeaseLost, RunParked
from runner.sql.grants import Grants
from runner.sql.limit_line import wake_line
from runner.sql.limits import charges, live_waiter
from runner.sql.runs import reading
from runner.sql.schema import limit_reservations, limit_waiters, limits, runs
from runner.sql.writer import Writer
from runner.store.rows import COUNTER_MAX
from runner.store.rules import Room, aware

_IS_SET = select(limits.c.name).where(limits.c.name == bindparam("name"))
_LIMIT_ROW = select(limits).where(limits.c.name == bindparam("name"))


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
    ) -> None:
        self.engine, self.run_id, self.epoch = engine, run_id, epoch
        self.writer, self.clock, self.grants = writer, clock, grants

    def reserve(self, limit: str, estimate: Estimate) -> Reservation:
        grants = self.grants
        if grants is not None and grants.holds(limit):  # a busy limit: from memory
            tokens = min(max(estimated(estimate), 0), COUNTER_MAX)
            handed = grants.hand_out(limit, self.run_id, self.epoch, tokens)
            if handed is not None:
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
                return handed
        with self.writer.turn() as connection, connection.begin():
            decided = _reserve(connection, self.run_id, self.epoch, limit, tokens, self.clock)
        if isinstance(decided, Reservation):
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
        with self.writer.turn() as connection, connection.begin():
            # The limit's row first, locked as a reservation locks it: a run parking for a
            # slot at this moment either sees this call settled or is woken below.
            limit = connection.execute(
                select(limits).where(limits.c.name == reservation.limit).with_for_update()
            ).first()
            at = utc_now(self.clock)
            connection.execute(
                update(limit_reservations)
                .where(limit_reservations.c.id == reservation.id)
                .values(tokens=min(max(tokens, 0), COUNTER_MAX), settled=True, settled_at=at)
            )
            if limit is not None and limit.concurrency is not None:
                wake_line(connection, limit, at)

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
    limit = connection.execute(
        select(limits).where(limits.c.name == name).with_for_update()
    ).first()
    if limit is None:
        return Reservation(name, None, tokens)  # not set: the calls draw from nothing
    at = utc_now(clock)  # read under the lock: every reservation of the limit in order
    r, w = limit_reservations.c, limit_waiters.c
    # The minute's charges are all this needs: older rows go, so the table stays small.
    connection.execute(
        delete(limit_reservations).where(
            r.limit_name == name, r.reserved_at < at - timedelta(seconds=2 * WINDOW_SECONDS)
        )
    )
    # And the line keeps only runs still coming back: one that finished while parked (a
    # cancel), or never came back past its grace, goes (it queues again if it returns).
    connection.execute(delete(limit_waiters).where(w.limit_name == name, ~live_waiter(at)))
    charged = charges(connection, name, at)
    mine = connection.execute(
        select(w.waiting_since).where(w.limit_name == name, w.run_id == run_id)
    ).first()
    ahead_of_me = select(w.tokens).where(w.limit_name == name, w.run_id != run_id, live_waiter(at))
    if mine is not None:
        since = mine.waiting_since
        ahead_of_me = ahead_of_me.where(
            (w.waiting_since < since) | ((w.waiting_since == since) & (w.run_id < run_id))
        )
    ahead = [int(n) for n in connection.execute(ahead_of_me).scalars()]
    room = Room(limit._mapping, at, charged, ahead, tokens)
    if room.fits():
        reservation_id = uuid.uuid4().hex
        connection.execute(
            limit_reservations.insert().values(
                id=reservation_id,
                limit_name=name,
                run_id=run_id,
                lease_epoch=epoch,
                tokens=tokens,
                settled=False,
                reserved_at=at,
            )
        )
        waited = 0.0
        if mine is not None:
            connection.execute(
                delete(limit_waiters).where(w.limit_name == name, w.run_id == run_id)
            )
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
            .where(w.limit_name == name, w.run_id == run_id)
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
