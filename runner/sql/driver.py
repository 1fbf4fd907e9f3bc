"""The journal's writes on the driver's own cursor: SQL rendered once, run at the driver's cost.

`Connection.execute`, even `exec_driver_sql`, builds an execution context and a result for
every statement: about 40 us a statement here, as much as the driver's own work for a
journal row, twice a step. The journal's writes skip that:

- Each statement is rendered once per dialect (`Prepared`, from a Core statement): its SQL
  text, the order of its binds, and their types' bind processors, so a row is byte for
  byte what `Connection.execute` writes.
- A write (`Write`) runs on the DBAPI cursor. When the engine has listeners for its
  statements or commits, or `echo` is on, it takes the path SQLAlchemy itself takes for the
  statements it runs outside an execution context (`Connection._cursor_execute`,
  `_commit_impl`), so they still hear every statement and commit
  (tests/integration/test_write_path.py counts them) and the log shows them; otherwise the
  statement goes straight to the driver. Either way a driver's error is handled by
  SQLAlchemy (`_handle_dbapi_exception`): raised as its IntegrityError, OperationalError,
  ..., and a lost connection invalidated, so the next use reconnects. Those are private
  methods of SQLAlchemy's Connection, stable since 1.4; tests/integration/test_driver_writes.py
  fails loudly if one goes.
- How a write transaction begins is the backend's (`begin_write`): BEGIN IMMEDIATE on
  SQLite; on PostgreSQL a write of one statement runs in autocommit, its own transaction,
  which saves the BEGIN and COMMIT round trips of psycopg's implicit transaction.

The SQLAlchemy Connection is never inside a transaction of its own meanwhile: a write
begins, and ends, on the driver connection beneath it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from runner.sql.backend import backend_for

Parameters = tuple[Any, ...] | dict[str, Any]
# Where a driver connection's cursor for the journal's writes is kept (its pool record's info),
# and its cursor for statements rendered with numbered placeholders (`Numbered`).
_CURSOR = "runner.driver.cursor"
_NUMBERED_CURSOR = "runner.driver.numbered-cursor"
# psycopg turns a statement's `%(name)s` into PostgreSQL's `$1` at every execution, and keeps
# the result only for a statement of at most this many bytes and binds (psycopg._queries'
# MAX_CACHED_STATEMENT_LENGTH and _PARAMS): a longer one is parsed again each time, by a loop
# in Python over its placeholders. The journal write that reserves a run's next call
# (runner.sql.reserving: 5.8 KB, 70 binds) spent 170 us of CPU a write there.
_PSYCOPG_CACHES_BYTES = 4096
_PSYCOPG_CACHES_BINDS = 50
_PLACEHOLDER = re.compile(r"%\(([^)]+)\)s|%%|%")


class Numbered(str):
    """A statement's text rendered with PostgreSQL's own placeholders (`$1`, ...), for a
    psycopg raw cursor, which sends it as it is: its parameters a tuple in that order."""


def numbered(sql: str) -> tuple[Numbered, tuple[str, ...]]:
    """`sql` in psycopg's named style (`%(name)s`, `%%`) with numbered placeholders, and the
    bind names in their numbers' order (a name used twice keeps its first number)."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            if match.group(0) != "%%":
                raise ValueError(f"a lone % in a statement rendered for psycopg: {sql[:80]}")
            return "%"
        return f"${numbers.setdefault(name, len(numbers) + 1)}"

    return Numbered(_PLACEHOLDER.sub(number, sql)), tuple(numbers)


@dataclass(frozen=True)
class Prepared:
    """A statement as its driver takes it, rendered once per dialect."""

    sql: str
    # Positional drivers (SQLite) and `Numbered` statements: the values in their binds' order.
    order: Callable[[dict[str, Any]], tuple[Any, ...]] | None
    convert: tuple[tuple[str, Callable[[Any], Any]], ...]  # (bind name, its type's processor)
    names: tuple[str, ...] | None = None  # those binds, in that order
    # The values of its literals (anonymous binds: a sum's 0, a status compared with),
    # which the caller's values leave out.
    literals: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, statement: ClauseElement, dialect: Dialect) -> Prepared:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        order = None
        names: tuple[str, ...] | None = None
        if compiled.positional:
            assert compiled.positiontup is not None
            names = tuple(compiled.positiontup)
            order = _order_of(names)
        convert = []
        for name, bind in compiled.binds.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                convert.append((name, process))
        literals = tuple(
            (name, bind.value) for name, bind in compiled.binds.items() if not bind.required
        )
        sql = compiled.string
        if (
            dialect.driver == "psycopg"
            and (
                len(sql.encode()) > _PSYCOPG_CACHES_BYTES
                or len(compiled.binds) > _PSYCOPG_CACHES_BINDS
            )
            and _raw_cursors()
        ):
            sql, names = numbered(sql)
            order = _order_of(names)
        return cls(
            sql=sql,
            order=order,
            convert=tuple(convert),
            names=names,
            literals=literals,
        )

    def convert_names(self) -> list[str]:
        """The binds whose values its driver takes converted, in order."""
        return [name for name, _ in self.convert]

    def parameters(self, values: dict[str, Any]) -> Parameters:
        """`values` keyed by bind name, as the driver takes them (converted in place)."""
        for name, value in self.literals:
            values.setdefault(name, value)
        for name, process in self.convert:
            values[name] = process(values[name])
        return values if self.order is None else self.order(values)


def _raw_cursors() -> bool:
    """Whether psycopg has raw cursors (3.2 on; the project allows 3.1, which parses)."""
    import psycopg  # only asked of a psycopg dialect: imported already

    return hasattr(psycopg, "RawCursor")


def _order_of(names: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    # itemgetter of one name returns the value itself, not a 1-tuple
    return itemgetter(*names) if len(names) > 1 else lambda v: tuple(v[n] for n in names)


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


class _OnCursor:
    """Statements on the driver connection's own cursor beneath `connection`."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        pooled = connection.connection  # reconnects if invalidated
        dbapi_connection = pooled.dbapi_connection
        assert dbapi_connection is not None
        self.dbapi_connection = dbapi_connection
        # One cursor per driver connection, kept in the pool's record of it (cleared when
        # the connection is replaced): making a psycopg cursor costs about 4 us a write.
        self.info = pooled.info
        cursor = self.info.get(_CURSOR)
        if cursor is None or cursor.connection is not dbapi_connection:
            cursor = self.info[_CURSOR] = dbapi_connection.cursor()
        self.cursor = cursor
        # Whether anything listens to or logs the statements (the engine's events, `echo`):
        # then each goes through SQLAlchemy's own path, which tells them; else straight to
        # the driver, errors still handled (wrapped, a lost connection invalidated) by it.
        self.watched = bool(
            connection._echo
            or connection.dialect._has_events
            or connection.dispatch.before_cursor_execute
            or connection.dispatch.after_cursor_execute
        )

    def _drop_cursor(self) -> None:
        self.info.pop(_CURSOR, None)
        numbered = self.info.pop(_NUMBERED_CURSOR, None)
        for cursor in (self.cursor, numbered):
            with contextlib.suppress(Exception):  # a lost connection's cursor may not close
                if cursor is not None:
                    cursor.close()

    def execute(self, sql: str, parameters: Parameters = ()) -> None:
        self._execute(sql, parameters)

    def _execute(self, sql: str, parameters: Parameters) -> Any:
        """Run a statement; the cursor it ran on."""
        cursor = self._numbered_cursor() if type(sql) is Numbered else self.cursor
        if self.watched:
            self.connection._cursor_execute(cursor, sql, parameters)
            return cursor
        try:
            cursor.execute(sql, parameters)
        except BaseException as exc:
            self.connection._handle_dbapi_exception(exc, sql, parameters, cursor, None)
        return cursor

    def _numbered_cursor(self) -> Any:
        cursor = self.info.get(_NUMBERED_CURSOR)
        if cursor is None or cursor.connection is not self.dbapi_connection:
            import psycopg  # only a psycopg connection runs a Numbered statement

            connection: Any = self.dbapi_connection
            cursor = self.info[_NUMBERED_CURSOR] = psycopg.RawCursor(connection)
        return cursor

    def rows(self, sql: str, parameters: Parameters) -> Sequence[Any]:
        """Run a statement; the rows it returns (all of them: a statement with RETURNING is
        done only once they are read)."""
        rows: Sequence[Any] = self._execute(sql, parameters).fetchall()
        return rows

    def count(self, sql: str, parameters: Parameters) -> int:
        """Run a statement; how many rows it changed."""
        changed: int = self._execute(sql, parameters).rowcount
        return changed


class Write(_OnCursor):
    """One write transaction on a connection's driver connection, as a `with` block:
    committed when the block ends, rolled back if it raises. `one_statement`: the block
    runs exactly one statement (which the backend may then run as its own transaction)."""

    def __init__(self, connection: Connection, *, one_statement: bool = False) -> None:
        super().__init__(connection)
        self.one_statement = one_statement
        self.switched = False

    def __enter__(self) -> Write:
        try:
            backend = backend_for(self.connection.dialect.name)
            self.switched = backend.begin_write(
                self.execute, self.dbapi_connection, self.one_statement
            )
        except BaseException:
            self._drop_cursor()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        connection = self.connection
        failed = kind is not None
        try:
            if failed:
                # After a driver's error SQLAlchemy has rolled back already (or invalidated
                # a lost connection, which this then leaves alone); a LeaseLost still needs it.
                connection._rollback_impl()
            else:
                self._commit()
        except BaseException:
            failed = True
            raise
        finally:
            if self.switched:
                backend_for(connection.dialect.name).end_write(self.dbapi_connection)
            if failed:  # SQLAlchemy may have closed it: the next write makes a new one
                self._drop_cursor()

    def _commit(self) -> None:
        connection = self.connection
        if self.watched or connection.dispatch.commit:
            connection._commit_impl()  # tells the listeners (the write-path test counts)
            return
        dbapi_connection = self.dbapi_connection
        if not backend_for(connection.dialect.name).left_to_commit(dbapi_connection):
            return
        try:
            dbapi_connection.commit()
        except BaseException as exc:
            connection._handle_dbapi_exception(exc, None, None, None, None)


def commit_if_changed(
    connection: Connection, sql: str, parameters: Parameters, rows: int, begin: str
) -> bool | None:
    """One statement in a write transaction of its own on the driver's cursor, committed if
    it changed exactly `rows` rows, else rolled back: whether it committed. `Write`'s work
    for the commonest write (one journal entry, nothing to read back) without its object
    and its hooks, begun by `begin`, its backend's `write_begins_with` (SQLite's BEGIN
    IMMEDIATE: a backend that switches something to begin takes `Write`). None, untried,
    when the connection's statements or commits are watched (listeners, `echo`): `Write`
    tells them. A driver's error is SQLAlchemy's to raise, as in `Write`, the transaction
    rolled back first."""
    on = _OnCursor(connection)
    if on.watched or connection.dispatch.commit:
        return None
    cursor, dbapi_connection = on.cursor, on.dbapi_connection
    changed = False
    try:
        try:
            cursor.execute(begin)
            cursor.execute(sql, parameters)
            changed = cursor.rowcount == rows
            if changed:
                dbapi_connection.commit()
            else:
                dbapi_connection.rollback()
        except BaseException:
            with contextlib.suppress(Exception):  # a lost connection may not roll back
                dbapi_connection.rollback()
            raise
    except Exception as exc:
        on._drop_cursor()
        connection._handle_dbapi_exception(exc, sql, parameters, cursor, None)
    return changed


def read_if_unwatched(
    connection: Connection, made: Callable[[], tuple[str, Parameters]]
) -> Sequence[Any] | None:
    """One statement (`made()`) on the driver's cursor, as it stands (a connection in
    autocommit: its own transaction): the rows it returns. None, untried (not made), when
    the connection's statements or commits are watched (listeners, `echo`), or it is not in
    autocommit: `Write` tells them and begins what it must."""
    on = _OnCursor(connection)
    dbapi_connection: Any = on.dbapi_connection
    if on.watched or connection.dispatch.commit or not getattr(dbapi_connection, "autocommit", 0):
        return None
    try:
        return on.rows(*made())
    except BaseException:
        on._drop_cursor()
        raise


class Statements(Protocol):
    """Where a write's statements run: a `Write` of its own, or `Within` a transaction."""

    def execute(self, sql: str, parameters: Parameters = ()) -> None: ...

    def rows(self, sql: str, parameters: Parameters) -> Sequence[Any]: ...

    def count(self, sql: str, parameters: Parameters) -> int: ...


class Within(_OnCursor):
    """A write's statements on the driver's cursor inside a transaction of SQLAlchemy's own
    on `connection`, one that holds more than the journal's statements (a child's last write
    delivers its end to its parent in the same commit: runner.sql.journal). It neither
    begins nor ends the transaction."""
