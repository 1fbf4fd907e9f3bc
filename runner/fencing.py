"""The journal's writes: one fenced statement per entry, one transaction per write.

The write path is the floor: a journal write is one INSERT that succeeds only while the
run's lease epoch is this worker's (on PostgreSQL a data-modifying CTE that also renews the
lease and takes the run's row lock), committed in one transaction, with the run's stop in
the same transaction when the entry ends the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, Insert, bindparam, case, insert, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from runner.errors import LeaseLost
from runner.journal import Counters, Entry, Stop
from runner.schema import entries, runs
from runner.status import RunStatus
from runner.store import encode, entry_row, now

_ENTRY_COLUMNS = [column.name for column in entries.columns]


def _fenced_insert(dialect: str) -> Insert:
    """INSERT the entry only while the run's epoch is this worker's, in ONE statement.

    It returns one row when written (with the run's cancel flag, read for free, so the loop
    needs no query of its own to notice a cancel) and none when fenced out. The entry's
    values are bound by column name, the fence's as `fence_*`.
    """
    values = [bindparam(name, type_=entries.c[name].type) for name in _ENTRY_COLUMNS]
    fence = (runs.c.id == bindparam("fence_run")) & (runs.c.lease_epoch == bindparam("fence_epoch"))
    if dialect == "postgresql":
        # Renew the lease and lock the run row in the same statement: a claimer's UPDATE
        # waits for this commit, and this INSERT inserts nothing once the epoch moved.
        # The lease is renewed once a third of it is spent (the heartbeat's pace), else set
        # to itself: an UPDATE that changes no indexed column is HOT, so a long run does not
        # add index entries (about 1 KB a step) to the runs table with every write.
        expiry = runs.c.lease_expires_at
        due = expiry.is_(None) | (expiry < bindparam("fence_renew_after", type_=expiry.type))
        renewed = case((due, bindparam("fence_expiry", type_=expiry.type)), else_=expiry)
        fenced = (
            update(runs)
            .where(fence)
            .values(lease_expires_at=renewed)
            .returning(runs.c.cancel_requested)
            .cte("fenced")
        )
        source = select(*values).select_from(fenced)
        return (
            insert(entries)
            .from_select(_ENTRY_COLUMNS, source)
            .add_cte(fenced)
            .returning(entries.c.seq, select(fenced.c.cancel_requested).scalar_subquery())
        )
    # SELECT ... FROM runs WHERE <fence> rather than WHERE EXISTS (<fence>): the same one row
    # or none, but SQLite runs it with RETURNING for about 10 us less a write.
    source = select(*values).select_from(runs).where(fence)
    flag = select(runs.c.cancel_requested).where(runs.c.id == bindparam("fence_run"))
    return (
        insert(entries)
        .from_select(_ENTRY_COLUMNS, source)
        .returning(entries.c.seq, flag.scalar_subquery())
    )


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


def _render(dialect: Dialect) -> _Rendered:
    compiled = _fenced_insert(dialect.name).compile(dialect=dialect)
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


_RENDERED: WeakKeyDictionary[Dialect, _Rendered] = WeakKeyDictionary()


def _rendered(dialect: Dialect) -> _Rendered:
    rendered = _RENDERED.get(dialect)
    if rendered is None:  # two threads may both render: the same text, no harm
        rendered = _RENDERED[dialect] = _render(dialect)
    return rendered


def append_entry(
    bind: Engine | Connection,
    run_id: str,
    epoch: int,
    seq: int,
    entry: Entry,
    stop: Stop | None,
    lease_seconds: float,
) -> bool:
    """One transaction: the entry (fenced by the epoch), and the run's end if `stop`.

    Returns whether a cancel has been requested for the run. LeaseLost if fenced out.
    """
    at = now()
    values = entry_row(run_id, seq, epoch, entry, at)
    values.update(
        fence_run=run_id,
        fence_epoch=epoch,
        fence_expiry=at + timedelta(seconds=lease_seconds),
        fence_renew_after=at + timedelta(seconds=lease_seconds * 2 / 3),
    )
    with _transaction(bind) as connection:
        rendered = _rendered(connection.dialect)
        written = connection.exec_driver_sql(rendered.sql, rendered.parameters(values)).first()
        if written is None:
            raise LeaseLost(f"run {run_id} was taken over by another worker: not writing")
        if stop is not None:
            _finish(connection, run_id, epoch, stop, entry.counters, at)
    return bool(written[1])


def finish_run(
    bind: Engine | Connection, run_id: str, epoch: int, stop: Stop, counters: Counters
) -> None:
    with _transaction(bind) as connection:
        _finish(connection, run_id, epoch, stop, counters, now())


@contextmanager
def _transaction(bind: Engine | Connection) -> Iterator[Connection]:
    """A transaction on `bind`: a journal passes its own connection (no pool checkout)."""
    if isinstance(bind, Connection):
        with bind.begin():
            yield bind
    else:
        with bind.begin() as connection:
            yield connection


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
            error=stop.error,
            wrapped_up=stop.wrapped_up,
            steps=counters.steps,
            tokens=counters.tokens,
            cost=counters.cost,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=at,
            finished_at=at,
        )
    )
    if result.rowcount != 1:
        raise LeaseLost(f"run {run_id} was taken over by another worker: not finishing it")
