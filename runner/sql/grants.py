"""A worker's grants of a busy limit: a block of its requests and tokens reserved in one
transaction, handed to the worker's model calls from memory and settled in one batch.

A reservation and a settle per call are two commits more per model call (1 to 3 ms here);
for a limit allowing GRANT_FROM_REQUESTS or more requests a minute (or no count of them),
with no cap on calls at once, nobody in its line and no Retry-After holding it back, a worker
instead reserves a grant: 1/GRANT_SHARE of the limit's minute (at most GRANT_MOST_CALLS
requests), as that many rows of `limit_reservations` (one per request, the tokens shared
among them), inserted in one transaction under the limit's row lock with the same rule as a
reservation (runner.store.rules.Room): the fleet's charges, grants included, never pass the
limit. Each call of the worker's runs then takes a row (one request, and its estimate of the
grant's tokens) with no database round trip, and its settle is noted in memory. A worker
refused a grant (the minute nearly spent, or runs in line) reserves each call alone and asks
again GRANT_SECONDS later.

A grant hands out calls for GRANT_SECONDS after it was reserved, and only while it has a row
and the tokens for the call's estimate; then it is closed, and when its last call has
settled, one transaction writes the calls' usage on their rows (settled at that moment,
which is after each call ended: their minute starts no earlier than the provider's) and
deletes the rows not handed out (their room goes back to the fleet). Until then every row
counts at its share of the estimate, as a call reserved and not settled counts.

A worker killed holding a grant never settles it: its rows count, whole, as calls not settled
do (runner.core.limits.UNSETTLED_GRACE_SECONDS): from their reservation plus the grace, a
minute and a guard. Its calls were all sent within GRANT_SECONDS of that reservation, so the
provider's minute of each ends before the rows stop counting, with the rest of the grace (8 s)
left for a call's trip to the provider, as for a call reserved alone.

What a grant gives up: for up to GRANT_SECONDS its calls skip the line (a run that parked
since it was reserved waits for it to close) and a Retry-After heard by another worker or a
lower limit set meanwhile; `runner limit list` counts an open grant whole, and a grant's
unused rows until it closes (a timer closes it when its time is up, whether or not another
call comes) and its calls in flight have all settled. The in-memory store (runner.testing)
reserves each call alone: no limit its tests set reaches GRANT_FROM_REQUESTS.

A grant whose call ran for minutes is written after the sweep took its rows (no lease holds
them): its calls are written anew, settled at their usage, as any settle that finds no row
(runner.sql.limits.settle_call), and its rows not handed out stay gone.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, select, update

from runner.core.clock import Clock, utc_now
from runner.core.limits import Reservation
from runner.sql.limits import (
    SETTLE_GONE,
    charged,
    counted_at_reserve,
    live_waiter,
    locked_to_reserve,
    sweep,
    sweep_due,
)
from runner.sql.schema import limit_reservations, limit_waiters
from runner.sql.writer import Writer
from runner.store.rows import COUNTER_MAX
from runner.store.rules import Room

# A limit of fewer requests a minute keeps a reservation per call: a grant is a share of the
# minute, and a share of a small minute holds too few calls to be worth holding back.
GRANT_FROM_REQUESTS = 1_000
# A grant is this fraction of the limit's minute.
GRANT_SHARE = 20
# The most calls one grant holds (rows one transaction inserts).
GRANT_MOST_CALLS = 64
# The least calls a grant must hold (by its tokens, at the call's estimate) to be taken.
GRANT_LEAST_CALLS = 4
# How long after its reservation a grant hands out calls (see the module's doc: a killed
# worker's calls must be sent within the grace its rows count for).
GRANT_SECONDS = 2.0
# The lease epoch of a grant's rows until settled (epochs start at 1).
NO_LEASE = -1
# How often at most this process sweeps a limit (runner.sql.limits.sweep) when it takes a
# grant of it: a limit served only by grants is swept by nothing else, and would keep every
# row it ever charged. Less often than a call reserved alone (SWEEP_SECONDS): a grant is
# taken every few seconds by each worker, so most take none of the sweep's two statements,
# and the table keeps at most this long of calls past the two minutes the sweep keeps.
GRANT_SWEEP_SECONDS = 10.0

_r = limit_reservations.c
_AT = bindparam("at", type_=_r.settled_at.type)
_SETTLE_ROW = (
    update(limit_reservations)
    .where(_r.id == bindparam("row_id"))
    .values(
        run_id=bindparam("run"),
        lease_epoch=bindparam("epoch"),
        tokens=bindparam("used"),
        settled=True,
        settled_at=_AT,
        counted_from=_AT,  # a settled call's minute starts at its settle
    )
)
_RETURN_ROWS = delete(limit_reservations).where(_r.id.in_(bindparam("row_ids", expanding=True)))


@dataclass
class Grant:
    """One block of a limit reserved by this worker: its rows, and the calls given them."""

    limit: str
    reserved_at: datetime
    tokens: int  # the block's tokens, shared among its rows
    rows: list[str]  # rows not handed out yet
    handed: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # row: run, epoch, est
    used: dict[str, int] = field(default_factory=dict)  # row: tokens reported at settle
    spent: int = 0  # tokens handed out: each call's estimate, its usage once settled
    closed: bool = False
    settling: bool = False

    def gives(self, tokens: int, at: datetime) -> bool:
        """Whether a call of `tokens` may be handed out now (else the grant closes)."""
        return (
            not self.closed
            and bool(self.rows)
            and self.spent + tokens <= self.tokens
            and timedelta(0) <= at - self.reserved_at < timedelta(seconds=GRANT_SECONDS)
        )

    def due(self) -> bool:
        """Closed, with every call handed out settled: ready to write, once."""
        return self.closed and len(self.used) == len(self.handed) and not self.settling


def size_of(limit: Any, tokens: int) -> tuple[int, int] | None:
    """The requests and tokens of a grant of `limit` for calls of about `tokens` each
    (None: the limit reserves each call alone)."""
    if limit.concurrency is not None:
        return None
    rpm, tpm = limit.requests_per_minute, limit.tokens_per_minute
    if rpm is not None and rpm < GRANT_FROM_REQUESTS:
        return None
    calls = GRANT_MOST_CALLS if rpm is None else min(rpm // GRANT_SHARE, GRANT_MOST_CALLS)
    if tpm is None:
        return calls, min(max(tokens, 1) * calls, COUNTER_MAX)
    block = tpm // GRANT_SHARE
    if block < tokens * GRANT_LEAST_CALLS:
        return None
    return calls, block


class Grants:
    """This worker's open grants, one a limit at most, shared by its runs' threads."""

    def __init__(self, engine: Engine, writer: Writer, clock: Clock) -> None:
        self.engine, self.writer, self.clock = engine, writer, clock
        self._lock = threading.Lock()
        self._open: dict[str, Grant] = {}
        self._by_row: dict[str, Grant] = {}
        self._taking: dict[str, threading.Lock] = {}
        self._refused: dict[str, float] = {}  # limit: no grant asked for until (monotonic)
        # The limits whose last call here was reserved alone (no grant): the runs reserve
        # their next calls ahead, in their journal writes (runner.sql.limit_rides).
        self.alone: set[str] = set()

    def refusing(self, limit: str) -> bool:
        """Whether this worker asks for no grant of `limit` now (one was refused lately)."""
        return time.monotonic() < self._refused.get(limit, 0.0)

    def holds(self, limit: str) -> bool:
        """An open grant of `limit` may have room (a hint: `hand_out` decides)."""
        return limit in self._open

    def hand_out(self, limit: str, run_id: str, epoch: int, tokens: int) -> Reservation | None:
        """A call from the open grant of `limit`, if it has room now (no database)."""
        with self._lock:
            grant = self._open.get(limit)
            if grant is None:
                return None
            if grant.gives(tokens, utc_now(self.clock)):
                row = grant.rows.pop()
                grant.handed[row] = (run_id, epoch, tokens)
                grant.spent += tokens
                self._by_row[row] = grant
                return Reservation(limit, row, tokens)
            due = self._close(grant)
        if due:
            self._write(grant)
        return None

    def take(self, limit_row: Any, run_id: str, epoch: int, tokens: int) -> Reservation | None:
        """Reserve a new grant of `limit_row`'s limit (read just now) and hand out its first
        call; None if the limit reserves each call alone, or a grant does not fit now."""
        if size_of(limit_row, tokens) is None:
            return None
        name = limit_row.name
        with self._lock:
            taking = self._taking.setdefault(name, threading.Lock())
            if time.monotonic() < self._refused.get(name, 0.0):
                return None
        with taking:  # one thread takes the grant; the others draw from it
            handed = self.hand_out(name, run_id, epoch, tokens)
            if handed is not None:
                return handed
            with self.writer.turn() as connection, connection.begin():
                grant = self._reserve(connection, name, run_id, epoch, tokens)
            if grant is None:
                # Near its minute's end or with runs in line, a limit's calls go alone for
                # a while: asking for a grant at each call would be a transaction more.
                with self._lock:
                    self._refused[name] = time.monotonic() + GRANT_SECONDS
                return None
            with self._lock:
                old = self._open.get(name)
                due = old is not None and self._close(old)
                self._open[name] = grant
            # Closed when its time is up even if no call comes to close it: a worker whose
            # runs stopped calling would hold its unused rows until they aged out.
            timer = threading.Timer(GRANT_SECONDS + 0.1, self._expire, (grant,))
            timer.daemon = True
            timer.start()
            if due:
                assert old is not None
                self._write(old)
            return self.hand_out(name, run_id, epoch, tokens)

    def _reserve(
        self, connection: Connection, name: str, run_id: str, epoch: int, tokens: int
    ) -> Grant | None:
        limit = locked_to_reserve(connection, name)
        if limit is None:
            return None
        size = size_of(limit, tokens)
        at = utc_now(self.clock)  # read under the lock, as a reservation's
        if size is None or _anyone_in_line(connection, name, at):
            return None
        calls, block = size
        if sweep_due(str(self.engine.url), name, GRANT_SWEEP_SECONDS):
            sweep(connection, name, at)
        totals = charged(connection, name, at, in_flight=False)
        room = Room(limit._mapping, at, totals, [], block, requests=calls)
        if not room.fits():
            return None
        rows = [uuid.uuid4().hex for _ in range(calls)]
        share, left = divmod(block, calls)
        connection.execute(
            limit_reservations.insert(),
            [
                {
                    "id": row,
                    "limit_name": name,
                    # Until handed out and settled, a row is no call's: no lease holds it
                    # (a run's lease would count it in flight in `runner limit list`).
                    "run_id": run_id,
                    "lease_epoch": NO_LEASE,
                    "tokens": share + (1 if n < left else 0),
                    "settled": False,
                    "reserved_at": at,
                    "counted_from": counted_at_reserve(at),
                }
                for n, row in enumerate(rows)
            ],
        )
        return Grant(name, at, block, rows)

    def settle(self, reservation: Reservation, tokens: int) -> bool:
        """Note the usage of a call handed out from a grant (False: not one of them)."""
        with self._lock:
            grant = self._by_row.pop(reservation.id or "", None)
            if grant is None:
                return False
            used = min(max(tokens, 0), COUNTER_MAX)
            grant.used[reservation.id or ""] = used
            grant.spent += used - grant.handed[reservation.id or ""][2]
            if not grant.closed and not grant.gives(0, utc_now(self.clock)):
                self._close(grant)
            due = grant.due()
            if due:
                grant.settling = True
        if due:
            self._write(grant)
        return True

    def close_limit(self, limit: str) -> None:
        """Hand out no more from the open grant of `limit` (a Retry-After was heard)."""
        with self._lock:
            grant = self._open.get(limit)
            due = grant is not None and self._close(grant)
        if due:
            assert grant is not None
            self._write(grant)

    def _expire(self, grant: Grant) -> None:
        """A grant's time is up (on this machine's clock): close it, unless the store's clock
        says otherwise (a test's manual one), and write it if its calls have all settled."""
        with self._lock:
            if grant.closed or grant.gives(0, utc_now(self.clock)):
                return
            due = self._close(grant)
        if due:
            # Not written (the database away, the store closed): its rows age out instead.
            with contextlib.suppress(Exception):
                self._write(grant)

    def close(self) -> None:
        """Close every grant; write those whose calls have all settled."""
        for limit in list(self._open):
            self.close_limit(limit)

    def _close(self, grant: Grant) -> bool:
        """Close `grant` (under the lock): whether it is now due to be written by the caller."""
        grant.closed = True
        if self._open.get(grant.limit) is grant:
            del self._open[grant.limit]
        due = grant.due()
        if due:
            grant.settling = True
        return due

    def _write(self, grant: Grant) -> None:
        """The grant's calls settled at their usage and its other rows returned: one commit."""
        at = utc_now(self.clock)
        settled = [
            {"row_id": row, "run": run, "epoch": epoch, "used": grant.used[row], "at": at}
            for row, (run, epoch, _) in grant.handed.items()
        ]
        with self.writer.turn() as connection, connection.begin():
            if settled:
                written = connection.execute(_SETTLE_ROW, settled).rowcount
                if written != len(settled) or not connection.dialect.supports_sane_multi_rowcount:
                    # The sweep took rows of the grant (a call ran for minutes: no lease holds
                    # them): their calls are written anew, settled (runner.sql.limits).
                    gone = [
                        {"reservation": row["row_id"], "name": grant.limit, **row}
                        for row in settled
                    ]
                    connection.execute(SETTLE_GONE, gone)
            if grant.rows:
                connection.execute(_RETURN_ROWS, {"row_ids": grant.rows})


def _anyone_in_line(connection: Connection, name: str, at: datetime) -> bool:
    """A run waits in `name`'s line: a grant would pass it (a reservation leaves it room)."""
    w = limit_waiters.c
    query = select(w.run_id).where(w.limit_name == name, live_waiter(at)).limit(1)
    return connection.execute(query).first() is not None
