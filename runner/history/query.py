"""Read-only SQL (`runner sql`): one statement, with a reader's privileges and a deadline.

How each database keeps the statement to reading is its own module's business
(`sqlite_reader`: a read-only file and an authorizer; `postgres_reader`: the reader role
and its security-definer function); this one picks by the URL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from runner.defaults import DEFAULT_QUERY_TIMEOUT
from runner.errors import DatabaseRefused
from runner.history import postgres_reader, sqlite_reader
from runner.history.reader import QueryResult, Reader
from runner.sql.backend import backend_for
from runner.sql.database import resolve_url
from runner.sql.urls import encode_password, not_a_url
from runner.store.payloads import describe, is_envelope

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
        yield QueryResult(result.columns, _described(result.rows))


def _described(rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The rows with each stored envelope (an encrypted or offloaded payload) shown as what
    it is, e.g. `[encrypted (key k2), 1,204 bytes]`, never as its ciphertext or reference."""
    for row in rows:
        if any(isinstance(value, str) and _ENVELOPE in value[:40] for value in row):
            yield tuple(_cell(value) for value in row)
        else:
            yield row


_ENVELOPE = "runner.payload"


def _cell(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if is_envelope(value):
        return describe(value)
    if value.startswith('"') and _ENVELOPE in value[:40]:  # a JSON column's envelope, as text
        try:
            inner = json.loads(value)
        except ValueError:
            return value
        return describe(inner) if is_envelope(inner) else value
    return value
