"""A connection for reading opened without SQLAlchemy: the common case only.

`runner list` spends most of its start-up importing SQLAlchemy, so it first asks
`open_reader` for a plain driver connection: sqlite3 on an existing file, or libpq itself
(runner.sql.libpq; psycopg where libpq cannot be loaded) for a `postgresql://`
(`postgres://`, `postgresql+psycopg://`) URL, on a schema at head. Anything
else gives None and the command takes the full path (`Runner`), which creates, migrates,
refuses or explains exactly as it always has: a file that does not exist, a URL this module
does not read the same way SQLAlchemy would, a schema not at SCHEMA_REVISION, and any
driver error while opening (a server away, a file it may not read, one damaged or locked).
The same one-line messages and exit codes then come from the one place that words them.

The URL is read as SQLAlchemy reads it (runner.sql.database `_parsed`): a password's `@`
encoded first (runner.sql.urls), the same pattern, user, password and database unquoted, and
psycopg given the connect arguments SQLAlchemy's psycopg dialect would give it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

from runner.defaults import BUSY_TIMEOUT_MS
from runner.errors import DatabaseRefused
from runner.sql import libpq
from runner.sql.reads import Reader, schema_at_head
from runner.sql.urls import encode_password, resolve_url

# SQLAlchemy's URL pattern (sqlalchemy.engine.url._parse_url), so that a URL is read the
# same way on both paths.
_URL = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)
_SQLITE = ("sqlite", "sqlite+pysqlite")
_POSTGRES = ("postgresql", "postgres", "postgresql+psycopg")
# The one query parameter of an SQLite URL (runner.sql.backend): it changes no read.
_SYNCHRONOUS_MODES = ("full", "normal")
# Query parameters that SQLAlchemy's psycopg dialect treats itself (several hosts).
_MULTIHOST = ("host", "port")


def open_reader(url: str | None) -> Reader | None:
    """A plain connection to the database at `url` (or RUNNER_DATABASE_URL, or ./runner.db)
    whose schema is at head; None where the full path must open it (see the module)."""
    found = _URL.match(encode_password(resolve_url(url)))
    if found is None:
        return None
    parts = found.groupdict()
    query = parse_qsl(parts["query"]) if parts["query"] is not None else []
    if len({key for key, _ in query}) != len(query):
        return None  # a parameter given twice: SQLAlchemy makes a list of it
    options = dict(query)
    name = parts["name"]
    if name in _SQLITE:
        return _sqlite(parts, options)
    if name in _POSTGRES:
        return _postgres(parts, options)
    return None


def require_file(url: str | None) -> None:
    """DatabaseRefused if `url` names a SQLite file that does not exist: a read (`list`,
    `show`) never creates one, so a mistyped name is said, not answered with no runs."""
    found = _URL.match(encode_password(resolve_url(url)))
    if found is None or found.group("name") not in _SQLITE:
        return
    database = unquote(found.group("database") or "")
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database).absolute()
    if not path.exists():
        raise DatabaseRefused(
            f"no SQLite database at {path}: check its name (a run, a submit or "
            "`runner db upgrade` creates one; a read never does)"
        )


def _sqlite(parts: dict[str, Any], options: dict[str, str]) -> Reader | None:
    if parts["username"] is not None or parts["ipv4host"] or parts["ipv6host"] or parts["port"]:
        return None
    if set(options) - {"synchronous"}:
        return None
    if options.get("synchronous", "full").lower() not in _SYNCHRONOUS_MODES:
        return None  # the full path refuses it, in its words
    database = unquote(parts["database"] or "")
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    path = Path(database).absolute()
    if not path.is_file():
        return None  # the full path creates and migrates it, or says why not
    import sqlite3  # here: `runner list` on PostgreSQL need not load it (1 ms of its start)

    try:
        # isolation_level=None: each SELECT on its own, never a write lock taken; the
        # busy timeout as the engine's (a checkpoint or recovery may hold the file).
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error:
        return None
    return _at_head(Reader(connection))


def _postgres(parts: dict[str, Any], options: dict[str, str]) -> Reader | None:
    if set(options) & set(_MULTIHOST):
        return None
    arguments: dict[str, Any] = {}
    # As URL.translate_connect_args gives them to the dialect: only the parts present.
    for part, argument in (
        ("ipv4host", "host"), ("ipv6host", "host"), ("database", "dbname"),
        ("username", "user"), ("password", "password"),
    ):  # fmt: skip
        value = parts[part]
        if value:
            arguments[argument] = value if part.endswith("host") else unquote(value)
    if parts["port"]:
        if not parts["port"].isdigit():
            return None  # the full path says what is wrong with it
        arguments["port"] = int(parts["port"])
    arguments.update(options)
    try:
        # libpq alone first: importing psycopg is most of these commands' start-up.
        plain = libpq.connect(arguments)
    except libpq.Error:
        return None  # the full path says why, in its words
    if plain is not None:
        return _at_head(Reader(plain))
    try:
        import psycopg
    except ImportError:
        return None
    try:
        connection = (
            psycopg.connect(**arguments, autocommit=True)
            if arguments
            else psycopg.connect("", autocommit=True)
        )
    except psycopg.Error:
        return None
    return _at_head(Reader(connection))


def _at_head(reader: Reader) -> Reader | None:
    """The reader, if its schema is at head; else None, the connection closed."""
    try:
        if schema_at_head(reader):
            return reader
    except reader.errors:
        pass  # no version table, a damaged file, a role that may not read it: the full path
    reader.close()
    return None
