"""The journal's writes on the driver's own cursor: SQL rendered once, run at the driver's cost.

`Connection.execute`, even `exec_driver_sql`, builds an execution context and a result for
every statement: about 40 us a statement here, as much as the driver's own work for a
journal row, twice a step. The journal's writes skip that:

- Each statement is rendered once per dialect (`Prepared`, from a Core statement): its SQL
  text, the order of its binds, and their types' bind processors, so a row is byte for
  byte what `Connection.execute` writes.
- A write (`write`) runs on the DBAPI cursor through the path SQLAlchemy itself takes for
  the statements it runs outside an execution context (`Connection._cursor_execute`,
  `_commit_impl`, `_rollback_impl`). So the engine's events still hear every statement and
  every commit (tests/integration/test_write_path.py counts them), `echo` still logs them, a
  driver's error is still raised as SQLAlchemy's (IntegrityError, OperationalError, ...),
  and a lost connection is invalidated, so the next use reconnects.
- How a write transaction begins is the backend's (`begin_write`): BEGIN IMMEDIATE on
  SQLite; on PostgreSQL a write of one statement runs in autocommit, its own transaction,
  which saves the BEGIN and COMMIT round trips of psycopg's implicit transaction.

The SQLAlchemy Connection is never inside a transaction of its own meanwhile: a write
begins, and ends, on the driver connection beneath it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from runner.backend import backend_for

Parameters = tuple[Any, ...] | dict[str, Any]


@dataclass(frozen=True)
class Prepared:
    """A statement as its driver takes it, rendered once per dialect."""

    sql: str
    order: Callable[[dict[str, Any]], tuple[Any, ...]] | None  # positional drivers (SQLite)
    convert: tuple[tuple[str, Callable[[Any], Any]], ...]  # (bind name, its type's processor)

    @classmethod
    def of(cls, statement: ClauseElement, dialect: Dialect) -> Prepared:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        order = None
        if compiled.positional:
            assert compiled.positiontup is not None
            names = compiled.positiontup
            # itemgetter of one name returns the value itself, not a 1-tuple
            order = itemgetter(*names) if len(names) > 1 else lambda v: (v[names[0]],)
        convert = []
        for name, bind in compiled.binds.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                convert.append((name, process))
        return cls(sql=compiled.string, order=order, convert=tuple(convert))

    def parameters(self, values: dict[str, Any]) -> Parameters:
        """`values` keyed by bind name, as the driver takes them (converted in place)."""
        for name, process in self.convert:
            values[name] = process(values[name])
        return values if self.order is None else self.order(values)


_PREPARED: WeakKeyDictionary[Dialect, dict[Hashable, Prepared]] = WeakKeyDictionary()


def prepared(dialect: Dialect, key: Hashable, build: Callable[[], ClauseElement]) -> Prepared:
    """The statement `build()` makes, rendered for `dialect` the first time `key` is asked.

    Kept per dialect, not per connection: the text outlives a reconnect (the drivers keep
    their own per-connection statement caches: sqlite3's, psycopg's server-side prepares).
    """
    by_key = _PREPARED.get(dialect)
    if by_key is None:  # two threads may both render: the same text, no harm
        by_key = _PREPARED[dialect] = {}
    found = by_key.get(key)
    if found is None:
        found = by_key[key] = Prepared.of(build(), dialect)
    return found


class Write:
    """The statements of one write transaction, on the driver's cursor."""

    def __init__(self, connection: Connection, cursor: Any) -> None:
        self.connection = connection
        self.cursor = cursor

    def rows(self, sql: str, parameters: Parameters) -> list[Any]:
        """Run a statement; the rows it returns (all of them: a statement with RETURNING is
        done only once they are read)."""
        self.connection._cursor_execute(self.cursor, sql, parameters)
        rows: list[Any] = self.cursor.fetchall()
        return rows

    def count(self, sql: str, parameters: Parameters) -> int:
        """Run a statement; how many rows it changed."""
        self.connection._cursor_execute(self.cursor, sql, parameters)
        changed: int = self.cursor.rowcount
        return changed


@contextmanager
def write(connection: Connection, *, one_statement: bool = False) -> Iterator[Write]:
    """One write transaction on `connection`'s driver connection: committed when the block
    ends, rolled back if it raises. `one_statement`: the block runs exactly one statement
    (which the backend may then run as its own transaction)."""
    backend = backend_for(connection.dialect.name)
    dbapi_connection = connection.connection.dbapi_connection  # reconnects if invalidated
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    switched = False
    try:
        switched = backend.begin_write(connection, dbapi_connection, cursor, one_statement)
        yield Write(connection, cursor)
        connection._commit_impl()
    except BaseException:
        # After a driver's error SQLAlchemy has rolled back already (or invalidated a lost
        # connection, which this then leaves alone); a LeaseLost still needs it.
        connection._rollback_impl()
        raise
    finally:
        if switched:
            backend.end_write(dbapi_connection)
        cursor.close()
