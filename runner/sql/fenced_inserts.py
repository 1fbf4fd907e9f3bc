"""The journal's fenced inserts: each statement rendered once per dialect, and the values it
binds (an entry's columns, then the fence: the run's id and lease epoch, and on PostgreSQL
the lease's renewal).

A fenced insert writes its rows only while the run's lease epoch is the writer's, and reads
back what the run heard (`Heard`). Its variants carry more in the same statement: a model
call's settlement or its next reservation (runner.sql.limit_rides), or the run's end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from weakref import WeakKeyDictionary

from sqlalchemy import bindparam, exists, select, true, update
from sqlalchemy.engine import Dialect

from runner.sql import reserving
from runner.sql.backend import Backend, backend_for
from runner.sql.driver import Prepared, prepared
from runner.sql.limits import settle_gone
from runner.sql.schema import limit_reservations, runs
from runner.store.rows import ENTRY_COLUMNS

# The run's columns a finish sets from values, each bound as `set_<column>`.
FINISHED = (
    "status",
    "stop_reason",
    "output",
    "output_format",
    "error",
    "wrapped_up",
    "steps",
    "tokens",
    "cost",
    "updated_at",
    "finished_at",
)


class Heard(NamedTuple):
    """What a journal write reads back of its run, for free: whether a cancel was asked,
    and how many messages sent to it are not in its journal yet."""

    cancel: bool
    messages: int


NOTHING_HEARD = Heard(False, 0)


def fenced_insert(dialect: Dialect, rows: int) -> Prepared:
    """The fenced insert of `rows` entries (a step's calls go in one statement)."""
    return prepared(
        dialect, ("fenced_insert", rows), lambda: backend_for(dialect.name).fenced_insert(rows)
    )


def quiet_insert(dialect: Dialect, rows: int) -> tuple[str, int] | None:
    """`rows` entries' quiet fenced insert (`Backend.fenced_insert_quiet`), if the backend has
    one whose positional binds are the first of `fenced_insert(dialect, rows)`'s (the loud
    one binds the run's id again for what it reads back): its SQL and how many of the loud
    one's values it takes. Else None: the write reads back, as everywhere."""
    by_rows = _QUIET.get(dialect)
    if by_rows is None:  # two threads may both render: the same text, no harm
        by_rows = _QUIET[dialect] = {}
    try:
        return by_rows[rows]
    except KeyError:
        pass
    found = None
    statement = backend_for(dialect.name).fenced_insert_quiet(rows)
    if statement is not None:
        quiet, loud = Prepared.of(statement, dialect), fenced_insert(dialect, rows)
        if (
            quiet.names is not None
            and loud.names is not None
            and loud.names[: len(quiet.names)] == quiet.names
            and quiet.convert_names() == loud.convert_names()
            and quiet.literals == loud.literals == ()
        ):
            found = (quiet.sql, len(quiet.names))
    by_rows[rows] = found
    return found


_QUIET: WeakKeyDictionary[Dialect, dict[int, tuple[str, int] | None]] = WeakKeyDictionary()


def fenced_insert_settling(dialect: Dialect, rows: int, checked: bool = False) -> Prepared:
    """The fenced insert of `rows` entries that also settles a model call's reservation, in
    a CTE of the same statement (runner.sql.limit_rides: one round trip, not four);
    `checked`: a call under a concurrency, whose limit's row it locks, returning whether to
    wake its line (runner.sql.reserving.settle_checked)."""

    def build() -> Any:
        r = limit_reservations.c
        at = bindparam("ride_at", type_=r.settled_at.type)
        reservation = bindparam("ride_reservation", type_=r.id.type)
        used = bindparam("ride_used", type_=r.tokens.type)
        settled = (
            update(limit_reservations)
            .where(r.id == reservation)
            .values(tokens=used, settled=true(), settled_at=at, counted_from=at)
            .returning(r.id)
            .cte("ride_settled")
        )
        # The sweep took the call's row (its lease lapsed while it was in flight): written
        # anew, settled (runner.sql.limits.settle_call).
        gone = settle_gone(
            reservation,
            bindparam("ride_limit", type_=r.limit_name.type),
            bindparam("ride_run", type_=r.run_id.type),
            bindparam("ride_epoch", type_=r.lease_epoch.type),
            used,
            at,
            ~exists(select(settled.c.id)),
        ).cte("ride_settled_gone")
        statement = backend_for(dialect.name).fenced_insert(rows).add_cte(settled).add_cte(gone)
        if checked:
            name = bindparam("ride_limit", type_=r.limit_name.type)
            graced = bindparam("ride_graced", type_=r.settled_at.type)
            statement = statement.returning(*reserving.settle_checked(name, at, graced))
        return statement

    return prepared(dialect, ("fenced_insert_settling", rows, checked), build)


def fenced_insert_reserving(dialect: Dialect, rows: int) -> Prepared:
    """The fenced insert of `rows` entries that also reserves the run's next model call, in
    CTEs of the same statement (runner.sql.reserving: one round trip, not six)."""

    def build() -> Any:
        statement = backend_for(dialect.name).fenced_insert(rows)
        ctes, returned = reserving.reserving(_fenced_cte(statement))
        for cte in ctes:
            statement = statement.add_cte(cte)
        return statement.returning(*returned)

    return prepared(dialect, ("fenced_insert_reserving", rows), build)


def _fenced_cte(statement: Any) -> Any:
    """The `fenced` CTE of a backend's fenced insert (the run's row, if its fence held)."""
    [fenced] = [cte for cte in statement._independent_ctes if cte.name == "fenced"]
    return fenced


def fenced_insert_finishing(dialect: Dialect, rows: int) -> Prepared:
    """The fenced insert of `rows` entries that also ends the run (`finishes_in_insert`),
    its columns bound as `set_<column>`, as runner.sql.fencing's finish binds them."""

    def build() -> Any:
        finished = {name: bindparam(f"set_{name}", type_=runs.c[name].type) for name in FINISHED}
        return backend_for(dialect.name).fenced_insert_finishing(rows, finished)

    return prepared(dialect, ("fenced_insert_finishing", rows), build)


@dataclass(frozen=True)
class Positional:
    """A one-entry fenced insert whose binds are the entry's columns in order, then the
    fence's (SQLite's, as rendered): its parameters made from `store.entry_values` with no
    dict on the way, the same values `Prepared.parameters` would give (test_driver_writes)."""

    sql: str
    convert: tuple[tuple[int, Callable[[Any], Any]], ...]  # (column index, processor)
    fence: tuple[str, ...]  # the fence's bind names after the entry's
    quiet: tuple[str, int] | None  # `quiet_insert`'s

    @classmethod
    def of(cls, statement: Prepared, quiet: tuple[str, int] | None) -> Positional | None:
        names = statement.names
        width = len(ENTRY_COLUMNS)
        if names is None or list(names[:width]) != ENTRY_COLUMNS:
            return None
        processed = dict(statement.convert)
        if any(name in processed for name in names[width:]):
            return None  # a fence value that needs converting: take the general path
        index = {name: i for i, name in enumerate(ENTRY_COLUMNS)}
        convert = tuple((index[name], process) for name, process in statement.convert)
        return cls(
            sql=statement.sql,
            convert=convert,
            fence=tuple(names[width:]),
            quiet=quiet,
        )

    def parameters(self, row: tuple[Any, ...], fence: dict[str, Any]) -> tuple[Any, ...]:
        values = list(row)
        for i, process in self.convert:
            values[i] = process(values[i])
        values.extend([fence[name] for name in self.fence])
        return tuple(values)


_POSITIONAL: WeakKeyDictionary[Dialect, Positional | None] = WeakKeyDictionary()


def positional_insert(dialect: Dialect) -> Positional | None:
    """The one-entry insert's positional fast path for `dialect`, if its driver has one."""
    try:
        return _POSITIONAL[dialect]
    except KeyError:
        positional = Positional.of(fenced_insert(dialect, 1), quiet_insert(dialect, 1))
        found = _POSITIONAL[dialect] = positional
        return found


def fence_values(
    backend: Backend, run_id: str, epoch: int, at: datetime, lease_seconds: float
) -> dict[str, Any]:
    """The fence's values: the run and the epoch a write must find, and where the backend's
    writes renew the lease (PostgreSQL), its new expiry and when the next write renews it."""
    fence: dict[str, Any] = {"fence_run": run_id, "fence_epoch": epoch}
    if backend.writes_renew_lease:  # else the statement has no use for them
        fence["fence_expiry"] = at + timedelta(seconds=lease_seconds)
        fence["fence_renew_after"] = at + timedelta(seconds=lease_seconds * 2 / 3)
    return fence


def insert_values(rows: Sequence[tuple[Any, ...]], fence: dict[str, Any]) -> dict[str, Any]:
    """The values of one fenced insert: the entries' (`name_<i>` for several) and the fence's."""
    if len(rows) == 1:
        values = dict(zip(ENTRY_COLUMNS, rows[0], strict=True))
    else:
        values = {
            f"{name}_{i}": value
            for i, row in enumerate(rows)
            for name, value in zip(ENTRY_COLUMNS, row, strict=True)
        }
    values.update(fence)
    return values
