"""Read-only SQL (`runner sql`): one statement, with a reader's privileges and a deadline.

How each database keeps the statement to reading is its own module's business
(`sqlite_reader`: a read-only file and an authorizer; `postgres_reader`: the reader role
and its security-definer function); this one picks by the URL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from runner.defaults import DEFAULT_QUERY_TIMEOUT
from runner.errors import DatabaseRefused
from runner.history import postgres_reader, sqlite_reader
from runner.history.reader import QueryResult, Reader
from runner.sql.backend import backend_for
from runner.sql.database import resolve_url
from runner.sql.urls import encode_password, not_a_url

# Seconds a query may run unless told otherwise (`--timeout`); 0 or None: no limit.
DEFAULT_TIMEOUT = DEFAULT_QUERY_TIMEOUT

_READERS: dict[str, Reader] = {"sqlite": sqlite_reader.read, "postgresql": postgres_reader.read}

__all__ = ["DEFAULT_TIMEOUT", "QueryResult", "read_only_query"]


@contextmanager
def read_only_query(
    url: str | None, sql: str, *, timeout: float | None = DEFAULT_TIMEOUT
) -> Iterator[QueryResult]:
    """Run one SQL statement that the database itself keeps to reading runner's history.

    SQLite: the file is opened read-only and an authorizer allows reads only (no ATTACH,
    no VACUUM, no write of any kind). PostgreSQL: a READ ONLY transaction, as the role
    `runner_reader`, through its security-definer function, whoever connects. Either way
    the statement stops after `timeout` seconds, and its rows are fetched as they are read.
    """
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must be 0 (no limit) or more seconds")
    text = resolve_url(url)
    try:
        backend = backend_for(make_url(encode_password(text)).get_backend_name())
    except ArgumentError:
        raise DatabaseRefused(not_a_url(text)) from None
    with _READERS[backend.name](text, sql, timeout) as result:
        yield result
