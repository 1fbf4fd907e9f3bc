"""A process's share of database connections: how many a worker keeps, and SQLite's
in-process write lock.

A run in flight holds a connection only while it writes, so a worker's pool is sized from
what its writers need at once and what the database can spare, never from its concurrency
alone: a thousand runs waiting for their models need a handful of connections, and
PostgreSQL's default `max_connections` is 100 for every client of the server.

On SQLite a write transaction holds the file's one write lock. Threads of one process that
meet it wait in SQLite's busy handler, which sleeps (1, 2, 5 ... 100 ms) and leaves the file
idle between writers; so every write of a process takes a lock per database file first, and
a thousand threads queue on it in Python, handed over the moment a commit ends. Since the
process's writes to a file take turns anyway, the journal's share one connection, kept for
the engine's life (`writer`), instead of each checking one out of the pool and giving it
back.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import QueuePool

from runner.database import open_engine
from runner.errors import DatabaseUnavailable, first_line
from runner.urls import redact_url

# A worker's pool on PostgreSQL: at most this many connections, and at most a fifth of what
# the server has free (others' workers, the page and psql need theirs too).
POSTGRES_POOL_CAP = 10
POSTGRES_SHARE = 5
# On SQLite writes take turns anyway (one write lock per file): a few connections serve
# the reads that run beside them.
SQLITE_POOL_CAP = 4
# The claim loop and the heartbeat write beside the runs: a pool is never smaller than
# this, or a thread holding the only connection could wait for a second one.
POOL_FLOOR = 2


@dataclass(frozen=True)
class PoolChoice:
    """How many connections a worker keeps, and why (the worker says so at start)."""

    size: int
    reason: str

    def describe(self, concurrency: int) -> str:
        return f"pool {self.size} connections for concurrency {concurrency} ({self.reason})"


def choose_pool(url: str, concurrency: int, cap: int | None = None) -> PoolChoice:
    """The pool for a worker running `concurrency` runs at once on the database at `url`.

    Never more than the runs, the claim loop and the heartbeat could use at once; on
    PostgreSQL a modest share of the connections the server has free; `cap` if given.
    """
    needed = concurrency + POOL_FLOOR
    engine = open_engine(url, pool=False)
    try:
        if engine.dialect.name == "postgresql":
            try:
                free, reason = _postgres_room(engine)
            except SQLAlchemyError as exc:
                # As when the runner itself cannot connect: a worker waits for its database.
                raise DatabaseUnavailable(
                    f"cannot open {redact_url(engine.url)}: {first_line(exc)}"
                ) from None
            size = min(needed, POSTGRES_POOL_CAP, max(POOL_FLOOR, free // POSTGRES_SHARE))
        else:
            size, reason = min(needed, SQLITE_POOL_CAP), "SQLite: writes take turns"
    finally:
        engine.dispose()
    if cap is not None:
        size, reason = min(size, max(cap, 1)), f"capped at {cap}; {reason}"
    return PoolChoice(size, reason)


def _postgres_room(engine: Engine) -> tuple[int, str]:
    """Connections the server has free for ordinary users, and how that was counted."""
    with engine.connect() as connection:
        limit, reserved, extra, in_use = connection.exec_driver_sql(
            "SELECT current_setting('max_connections')::int,"
            " current_setting('superuser_reserved_connections')::int,"
            # PostgreSQL 16 reserves more for pg_use_reserved_connections; older ones lack it.
            " coalesce(current_setting('reserved_connections', true), '0')::int,"
            " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        ).one()
    reserved += extra
    free = max(0, limit - reserved - in_use)
    return free, f"max_connections {limit}, {reserved} reserved, {in_use} in use"


# -- SQLite's in-process write lock ----------------------------------------------------------

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()
_BY_ENGINE: WeakKeyDictionary[Engine, threading.Lock | None] = WeakKeyDictionary()


def _lock_of(engine: Engine) -> threading.Lock | None:
    try:
        return _BY_ENGINE[engine]
    except KeyError:
        pass
    lock = None
    if engine.dialect.name == "sqlite":
        database = engine.url.database or ""
        # One lock per file, whichever engine (or spelling of the path) writes to it.
        key = database if database in ("", ":memory:") else os.path.realpath(database)
        with _LOCKS_GUARD:
            lock = _LOCKS.setdefault(key, threading.Lock())
    _BY_ENGINE[engine] = lock
    return lock


@contextlib.contextmanager
def writing(engine: Engine) -> Iterator[None]:
    """Hold this process's turn to write to `engine`'s database (SQLite; PostgreSQL has
    row locks and needs none). Take it before checking out the connection that writes."""
    lock = _lock_of(engine)
    if lock is None:
        yield
        return
    with lock:
        yield


# -- the journal's writer ------------------------------------------------------------------

_WRITERS: WeakKeyDictionary[Engine, Connection] = WeakKeyDictionary()


@contextlib.contextmanager
def writer(engine: Engine) -> Iterator[Connection]:
    """A connection to write on, with this process's turn to write to `engine` held.

    On SQLite the process's writes take turns on the file's lock, so they can share one
    connection: it is kept, checked out of the pool once for the engine's life (until
    `engine.dispose()`), where a checkout and return cost a journal write about 25 us of
    CPU, a sixth of its own. Not when the pool is too small to spare it: a reader waiting
    for the one connection the writer keeps would wait for ever. On PostgreSQL, whose row
    locks let writers run side by side, a connection from the pool for this write alone.
    """
    lock = _lock_of(engine)
    if lock is None or not _can_keep(engine):
        with writing(engine), engine.connect() as connection:
            yield connection
        return
    with lock:
        kept = _WRITERS.get(engine)
        if kept is None or kept.closed:
            if not event.contains(engine, "engine_disposed", _forget_writer):
                event.listen(engine, "engine_disposed", _forget_writer)
            kept = _WRITERS[engine] = engine.connect()
        try:
            yield kept
        finally:
            _reset(kept)


def keeps_writer(engine: Engine) -> bool:
    """Whether this process keeps a connection checked out for writing to `engine`."""
    kept = _WRITERS.get(engine)
    return kept is not None and not kept.closed


def _can_keep(engine: Engine) -> bool:
    pool = engine.pool
    # A pool of one, or of a fixed few with no overflow, has no connection to spare.
    return not isinstance(pool, QueuePool) or pool.size() + max(pool._max_overflow, 0) >= 2


def _reset(connection: Connection) -> None:
    """What giving the connection back to the pool would do: end any transaction left open
    (a write that failed half way), so the kept connection never holds the file's lock."""
    if connection.invalidated or connection.closed:
        return
    if connection.in_transaction():
        connection.rollback()
    dbapi_connection = connection.connection.dbapi_connection
    if dbapi_connection is not None and dbapi_connection.in_transaction:
        dbapi_connection.rollback()


def _forget_writer(engine: Engine) -> None:
    lock = _lock_of(engine)
    connection = _WRITERS.pop(engine, None)
    if connection is None or lock is None:
        return
    with lock:
        # Called once the pool is disposed of: given back to it, the connection would stay
        # open in the discarded pool until the collector found it. Detached, close shuts it.
        if not connection.closed and not connection.invalidated:
            connection.detach()
        connection.close()
