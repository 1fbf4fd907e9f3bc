"""`runner sql` on SQLite: the file opened read-only, an authorizer that lets through reads
only, and a deadline enforced by a progress handler.

`mode=ro` alone still let a statement ATTACH (and so create) another file, `VACUUM INTO`
a full copy of the database anywhere, and create temporary tables; and a recursive CTE
that never ends ran for ever. The authorizer is asked about every action of a statement
while SQLite compiles it, so a refused statement never starts.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy.engine import make_url

from runner.errors import DatabaseUnavailable, RunnerError
from runner.history.reader import (
    MAX_VALUE_BYTES,
    Bounds,
    QueryResult,
    failed,
    one_statement,
    read_only,
    streamed,
    timed_out,
    value_too_large,
)
from runner.sql.database import damaged
from runner.sql.urls import encode_password

# The actions a read needs. Everything else (ATTACH and DETACH, which VACUUM and VACUUM
# INTO also begin with, every INSERT, UPDATE, DELETE, CREATE, DROP and ALTER, temporary
# objects included, BEGIN, SAVEPOINT, ANALYZE, REINDEX) is denied.
_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
# Functions that reach outside the database, should a build of SQLite have them.
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
# PRAGMAs that only read, whatever their argument (a table, an index, a schema's name).
_PRAGMAS_READING = {
    "collation_list",
    "compile_options",
    "database_list",
    "foreign_key_check",
    "foreign_key_list",
    "function_list",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "module_list",
    "pragma_list",
    "quick_check",
    "table_info",
    "table_list",
    "table_xinfo",
}
# PRAGMAs that read a setting when given no value, and change it when given one.
_PRAGMAS_SETTING = {
    "application_id",
    "auto_vacuum",
    "busy_timeout",
    "cache_size",
    "data_version",
    "encoding",
    "foreign_keys",
    "freelist_count",
    "journal_mode",
    "page_count",
    "page_size",
    "query_only",
    "schema_version",
    "synchronous",
    "user_version",
}
_NAMES = {
    sqlite3.SQLITE_ATTACH: "ATTACH (and VACUUM, which attaches)",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_INSERT: "INSERT",
    sqlite3.SQLITE_UPDATE: "UPDATE",
    sqlite3.SQLITE_DELETE: "DELETE",
    sqlite3.SQLITE_TRANSACTION: "a transaction statement",
    sqlite3.SQLITE_SAVEPOINT: "SAVEPOINT",
    sqlite3.SQLITE_ANALYZE: "ANALYZE",
    sqlite3.SQLITE_REINDEX: "REINDEX",
    sqlite3.SQLITE_ALTER_TABLE: "ALTER TABLE",
}
_SCHEMA_TABLES = {"sqlite_master", "sqlite_temp_master", "sqlite_schema", "sqlite_temp_schema"}
# Virtual machine instructions between two looks at the clock (microseconds of work).
_PROGRESS_EVERY = 1000


@contextmanager
def read(url: str, sql: str, timeout: float | None) -> Iterator[QueryResult]:
    """Run one statement on the SQLite file of `url`, read-only, within `timeout` seconds."""
    database = make_url(encode_password(url)).database
    if not database or database == ":memory:":
        raise DatabaseUnavailable("runner sql needs a SQLite file, not an in-memory database")
    path = Path(database).resolve()
    if not path.is_file():
        raise DatabaseUnavailable(f"no SQLite database at {path}")
    # isolation_level=None: the sqlite3 module opens no transaction of its own (a BEGIN the
    # authorizer would refuse); each statement reads one snapshot.
    connection = sqlite3.connect(
        f"file:{quote(str(path))}?mode=ro", uri=True, timeout=30, isolation_level=None
    )
    try:
        guard = _Guard(url, Bounds(timeout))
        guard.install(connection)
        with guard.running():
            try:
                cursor = connection.execute(sql)
            except (sqlite3.Error, sqlite3.Warning) as exc:
                raise guard.refusal(exc) from None
        yield QueryResult(_names(cursor.description), streamed(lambda: _batch(cursor, guard)))
    finally:
        connection.close()


class _Guard:
    """The authorizer, the deadline and the size limits of one query, and what to say when
    one stops it.

    The deadline counts from the start of the command: executing the query, fetching its
    rows and writing them out. SQLite's own length limit caps every string and blob a
    statement makes or reads (randomblob(9e8), a doubling recursive CTE), before it is
    allocated: one C call that the progress handler cannot interrupt stays small.
    """

    def __init__(self, url: str, bounds: Bounds) -> None:
        self.url = url
        self.bounds = bounds
        self.timeout = bounds.timeout
        self.since: float | None = None
        self.denied: str | None = None

    def install(self, connection: sqlite3.Connection) -> None:
        with suppress(AttributeError):  # a Python built without extension loading
            connection.enable_load_extension(False)
        connection.execute("PRAGMA query_only = ON")
        connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        connection.set_authorizer(self.authorize)
        if self.timeout is not None:
            connection.set_progress_handler(self.over, _PROGRESS_EVERY)

    def authorize(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _by: str | None
    ) -> int:
        if action in _READS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() not in _DENIED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            self.denied = f"the function {arg2}()"
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _PRAGMAS_READING or (name in _PRAGMAS_SETTING and arg2 is None):
                return sqlite3.SQLITE_OK
            self.denied = f"PRAGMA {arg1}" + ("" if arg2 is None else " with a value")
            return sqlite3.SQLITE_DENY
        if arg1 in _SCHEMA_TABLES:  # CREATE, DROP and ALTER begin by writing the schema
            self.denied = "changing the schema (CREATE, DROP, ALTER)"
        else:
            self.denied = _NAMES.get(action, "a statement that writes")
        return sqlite3.SQLITE_DENY

    @contextmanager
    def running(self) -> Iterator[None]:
        self.bounds.remaining()  # out of time before SQLite is even asked: stop here
        self.since = time.monotonic()
        try:
            yield
        finally:
            self.since = None

    def over(self) -> int:
        # Nonzero interrupts the statement (SQLITE_INTERRUPT).
        return int(self.since is not None and self.bounds.over())

    def refusal(self, exc: BaseException) -> RunnerError:
        corrupt = damaged(self.url, exc)
        if corrupt is not None:
            return corrupt
        name = getattr(exc, "sqlite_errorname", "")
        if name == "SQLITE_INTERRUPT":
            return timed_out(self.timeout)
        if name == "SQLITE_TOOBIG":
            return value_too_large()
        if self.denied is not None:  # the authorizer refused it while it was compiled
            return read_only(f"{self.denied} is not allowed")
        if "not authorized" in str(exc):  # SQLite's own refusal (load_extension is off)
            return read_only(str(exc))
        if name == "SQLITE_READONLY":
            return read_only("the file is opened read-only")
        if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in str(exc):
            return one_statement()
        return failed(exc)


def _names(description: Any) -> list[str]:
    return [str(d[0]) for d in description] if description else []


def _batch(cursor: sqlite3.Cursor, guard: _Guard) -> Sequence[Any]:
    with guard.running():
        try:
            batch = cursor.fetchmany(guard.bounds.rows)
        except (sqlite3.Error, sqlite3.Warning) as exc:
            raise guard.refusal(exc) from None
    return guard.bounds.took(batch)
