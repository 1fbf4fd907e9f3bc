"""Read-only SQL (`runner sql`): one statement, on a connection the database keeps read-only.

SQLite opens the file with `mode=ro`; PostgreSQL runs a READ ONLY session and transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy.engine import make_url

from runner.database import open_engine, resolve_url
from runner.errors import DatabaseUnavailable, QueryFailed
from runner.urls import encode_password, redact_url


@dataclass
class QueryResult:
    """The columns of a query and its rows, fetched as they are read."""

    columns: list[str]
    rows: Iterator[tuple[Any, ...]]


_FETCH = 500


@contextmanager
def read_only_query(url: str | None, sql: str) -> Iterator[QueryResult]:
    """Run one SQL statement on a connection that the database itself keeps read-only.

    SQLite: the file is opened with `mode=ro`. PostgreSQL: the session and the transaction
    are READ ONLY, and the statement is sent as a prepared statement, which the server
    accepts only one of: no `COMMIT; SET ...` can reopen a writable transaction.
    """
    text = resolve_url(url)
    try:
        backend = make_url(encode_password(text)).get_backend_name()
    except Exception:
        raise DatabaseUnavailable(f"not a database URL: {redact_url(text)}") from None
    if backend == "sqlite":
        with _sqlite_query(text, sql) as result:
            yield result
    elif backend == "postgresql":
        with _postgres_query(text, sql) as result:
            yield result
    else:
        raise DatabaseUnavailable(f"runner sql reads SQLite and PostgreSQL, not {backend}")


@contextmanager
def _sqlite_query(url: str, sql: str) -> Iterator[QueryResult]:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise DatabaseUnavailable("runner sql needs a SQLite file, not an in-memory database")
    path = Path(database).resolve()
    if not path.is_file():
        raise DatabaseUnavailable(f"no SQLite database at {path}")
    connection = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=30)
    try:
        try:
            cursor = connection.execute(sql)
        except sqlite3.Error as exc:
            raise _refusal(exc) from None
        yield QueryResult(_names(cursor.description), _fetch(cursor, sqlite3.Error))
    finally:
        connection.close()


@contextmanager
def _postgres_query(url: str, sql: str) -> Iterator[QueryResult]:
    import psycopg

    engine = open_engine(url, pool=False)
    if engine.dialect.driver != "psycopg":
        raise DatabaseUnavailable("runner sql reads PostgreSQL through psycopg 3 only")
    try:
        raw = engine.raw_connection()
    except Exception as exc:
        engine.dispose()
        raise DatabaseUnavailable(f"cannot connect to {redact_url(url)}: {_first(exc)}") from None
    try:
        connection: Any = raw.driver_connection
        connection.rollback()
        connection.autocommit = True
        connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        connection.autocommit = False
        connection.read_only = True
        cursor = connection.cursor()
        # The first query takes the transaction's snapshot: after it, even the user's own
        # `SET TRANSACTION READ WRITE` is refused.
        cursor.execute("SELECT 1")
        try:
            cursor.execute(sql, prepare=True)
        except psycopg.Error as exc:
            raise _refusal(exc) from None
        yield QueryResult(_names(cursor.description), _fetch(cursor, psycopg.Error))
    finally:
        raw.close()  # rolled back and closed: the pool keeps no connection
        engine.dispose()


def _names(description: Any) -> list[str]:
    return [str(d[0]) for d in description] if description else []


def _fetch(cursor: Any, error: type[Exception]) -> Iterator[tuple[Any, ...]]:
    while True:
        try:
            batch = cursor.fetchmany(_FETCH)
        except error as exc:
            raise _refusal(exc) from None
        if not batch:
            return
        yield from (tuple(row) for row in batch)


def _refusal(exc: Exception) -> QueryFailed:
    readonly = getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY" or (
        getattr(exc, "sqlstate", None) == "25006"  # read_only_sql_transaction
    )
    if readonly:
        return QueryFailed(f"refused: runner sql is read-only ({_first(exc)})")
    if "multiple commands" in str(exc):  # PostgreSQL's words for a second statement
        return QueryFailed("query failed: runner sql runs one statement at a time")
    return QueryFailed(f"query failed: {_first(exc)}")


def _first(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
