"""The journal's writes: one fenced statement per entry, one transaction per write.

The write path is the floor: a journal write is one INSERT that succeeds only while the
run's lease epoch is this worker's (the statement itself is each backend's: on PostgreSQL a
data-modifying CTE that also renews the lease and takes the run's row lock), committed in
one transaction, with the run's stop in the same transaction when the entry ends the run,
or its move to `waiting` when the entry is a call waiting for a person. The calls of a step
of several are one fenced INSERT of all their rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from runner.backend import backend_for
from runner.budgets import StopReason
from runner.clock import SYSTEM, Clock, utc_now
from runner.errors import LeaseLost
from runner.journal import Counters, Entry, Stop
from runner.schema import entries, runs
from runner.status import RunStatus
from runner.store import amount, counter, encode, entry_row, plain_text


@dataclass(frozen=True)
class _Rendered:
    """The fenced insert as its driver takes it: rendered once per dialect.

    Executed with `exec_driver_sql`, a write skips SQLAlchemy's per-execution work for a
    compiled statement (cache lookup, parameter assembly, result mapping: about 0.05 ms a
    write, a sixth of a SQLite commit). Every value still goes through its column type's own
    bind processor, so the row is byte for byte what `connection.execute` would write, and
    the statement still passes through the engine's events.
    """

    sql: str
    order: Callable[[dict[str, Any]], tuple[Any, ...]] | None  # positional drivers (SQLite)
    convert: tuple[tuple[str, Callable[[Any], Any]], ...]  # (bind name, its type's processor)

    def parameters(self, values: dict[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """`values` keyed by bind name, as the driver takes them (converted in place)."""
        for name, process in self.convert:
            values[name] = process(values[name])
        return values if self.order is None else self.order(values)


def _render(dialect: Dialect, rows: int) -> _Rendered:
    compiled = backend_for(dialect.name).fenced_insert(rows).compile(dialect=dialect)
    assert isinstance(compiled, SQLCompiler)
    order = None
    if compiled.positional:
        assert compiled.positiontup is not None
        order = itemgetter(*compiled.positiontup)
    convert = []
    for name, bind in compiled.binds.items():
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            convert.append((name, process))
    return _Rendered(sql=compiled.string, order=order, convert=tuple(convert))


_RENDERED: WeakKeyDictionary[Dialect, dict[int, _Rendered]] = WeakKeyDictionary()
# The most entries one statement writes: a model asking for hundreds of calls at once must
# not reach the drivers' limits on bound values (SQLite's is 32,766), and few statements
# are ever rendered.
ROWS_PER_STATEMENT = 64


def _rendered(dialect: Dialect, rows: int = 1) -> _Rendered:
    """The fenced insert of `rows` entries (a step's calls go in one statement)."""
    by_rows = _RENDERED.get(dialect)
    if by_rows is None:  # two threads may both render: the same text, no harm
        by_rows = _RENDERED[dialect] = {}
    rendered = by_rows.get(rows)
    if rendered is None:
        rendered = by_rows[rows] = _render(dialect, rows)
    return rendered


@dataclass(frozen=True)
class Parking:
    """A run leaving its worker to wait for a person: the lease goes, the epoch stays."""

    timeout: float | None  # approval_timeout: seconds until an unanswered wait is denied


def append_entry(
    bind: Engine | Connection,
    run_id: str,
    epoch: int,
    seq: int,
    entry: Entry,
    stop: Stop | None,
    lease_seconds: float,
    clock: Clock = SYSTEM,
    parking: Parking | None = None,
) -> bool:
    """One transaction: the entry (fenced by the epoch), and the run's end if `stop`, or its
    move to `waiting` if `parking` (unless a cancel was requested: then the run finishes,
    `cancelled`, in the same transaction, since nobody would be left to honour it).

    Returns whether a cancel has been requested for the run. LeaseLost if fenced out.
    """
    return append_entries(
        bind, run_id, epoch, seq, (entry,), stop, lease_seconds, clock, parking=parking
    )


def append_entries(
    bind: Engine | Connection,
    run_id: str,
    epoch: int,
    seq: int,
    entries: Sequence[Entry],
    stop: Stop | None,
    lease_seconds: float,
    clock: Clock = SYSTEM,
    parking: Parking | None = None,
) -> bool:
    """One transaction: the entries from `seq` on, in ONE fenced statement (all or none
    are written), and the run's end if `stop` (or its move to `waiting`, see append_entry).

    Returns whether a cancel has been requested for the run. LeaseLost if fenced out.
    """
    at = utc_now(clock)
    fence = {
        "fence_run": run_id,
        "fence_epoch": epoch,
        "fence_expiry": at + timedelta(seconds=lease_seconds),
        "fence_renew_after": at + timedelta(seconds=lease_seconds * 2 / 3),
    }
    cancel = False
    with _transaction(bind) as connection:
        for start in range(0, len(entries), ROWS_PER_STATEMENT):
            chunk = entries[start : start + ROWS_PER_STATEMENT]
            cancel = _insert(connection, run_id, epoch, seq + start, chunk, fence, at)
        counters = entries[-1].counters
        if stop is not None:
            _finish(connection, run_id, epoch, stop, counters, at)
        elif parking is not None and cancel:
            _finish(connection, run_id, epoch, Stop(StopReason.CANCELLED), counters, at)
        elif parking is not None:
            _park(connection, run_id, epoch, parking, at)
    return cancel


def _insert(
    connection: Connection,
    run_id: str,
    epoch: int,
    seq: int,
    entries: Sequence[Entry],
    fence: dict[str, Any],
    at: datetime,
) -> bool:
    rendered = _rendered(connection.dialect, len(entries))
    if len(entries) == 1:
        values = entry_row(run_id, seq, epoch, entries[0], at)
    else:
        values = {
            f"{name}_{i}": value
            for i, entry in enumerate(entries)
            for name, value in entry_row(run_id, seq + i, epoch, entry, at).items()
        }
    values.update(fence)
    # The fence holds for every row or for none: the first returned row says which.
    written = connection.exec_driver_sql(rendered.sql, rendered.parameters(values)).first()
    if written is None:
        raise LeaseLost(f"run {run_id} was taken over by another worker: not writing")
    return bool(written[1])


def entry_written(connection: Connection, run_id: str, seq: int, epoch: int) -> bool | None:
    """After a write whose answer was lost: the run's cancel flag if entry `seq` is there,
    written under `epoch`, else None."""
    with _transaction(connection) as c:
        row = c.execute(
            select(entries.c.lease_epoch, runs.c.cancel_requested)
            .join(runs, runs.c.id == entries.c.run_id)
            .where(entries.c.run_id == run_id, entries.c.seq == seq)
        ).first()
    if row is None or row.lease_epoch != epoch:
        return None
    return bool(row.cancel_requested)


def finish_run(
    bind: Engine | Connection,
    run_id: str,
    epoch: int,
    stop: Stop,
    counters: Counters,
    clock: Clock = SYSTEM,
) -> None:
    with _transaction(bind) as connection:
        _finish(connection, run_id, epoch, stop, counters, utc_now(clock))


@contextmanager
def _transaction(bind: Engine | Connection) -> Iterator[Connection]:
    """A transaction on `bind`: a journal passes its own connection (no pool checkout)."""
    if isinstance(bind, Connection):
        with bind.begin():
            yield bind
    else:
        with bind.begin() as connection:
            yield connection


def _park(connection: Connection, run_id: str, epoch: int, parking: Parking, at: datetime) -> None:
    expires = None if parking.timeout is None else at + timedelta(seconds=parking.timeout)
    result = connection.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.lease_epoch == epoch)
        .values(
            status=RunStatus.WAITING,
            lease_owner=None,
            lease_expires_at=None,
            waiting_since=at,
            wait_expires_at=expires,
            updated_at=at,
        )
    )
    if result.rowcount != 1:
        raise LeaseLost(f"run {run_id} was taken over by another worker: not leaving it waiting")


def _finish(
    connection: Connection,
    run_id: str,
    epoch: int,
    stop: Stop,
    counters: Counters,
    at: datetime,
) -> None:
    output, fmt = encode(stop.output)
    result = connection.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.lease_epoch == epoch)
        .values(
            status=RunStatus.FINISHED,
            stop_reason=str(stop.reason),
            output=output,
            output_format=fmt,
            error=plain_text(stop.error),
            wrapped_up=stop.wrapped_up,
            steps=counter(counters.steps),
            tokens=counter(counters.tokens),
            cost=amount(counters.cost),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=at,
            finished_at=at,
        )
    )
    if result.rowcount != 1:
        raise LeaseLost(f"run {run_id} was taken over by another worker: not finishing it")
