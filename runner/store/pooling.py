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
the runner's life (`Writer`), instead of each checking one out of the pool and giving it
back.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import QueuePool

from runner.errors import first_line
from runner.store.database import open_engine
from runner.store.failures import unavailable
from runner.store.urls import redact_url

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
                raise unavailable(
                    f"cannot open {redact_url(engine.url)}: {first_line(exc)}", exc
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


class Writer:
    """Where a runner's journal writes go: a connection to write on, with the process's turn
    to write to the database held.

    On SQLite the process's writes take turns on the file's lock, so they can share one
    connection: it is kept, checked out of the pool at the first write and given back at
    `close` (the `Runner` closes its writer with itself), where a checkout and return per
    write cost it about 12 us, 25 of CPU after an fsync. Not when the pool is too small to
    spare it: a reader waiting for the one connection the writer keeps would wait for ever.
    On PostgreSQL, whose row locks let writers run side by side, and with `keep=False`, each
    write has a connection from the pool for itself alone.
    """

    def __init__(self, engine: Engine, *, keep: bool = True) -> None:
        self.engine = engine
        self._lock = _lock_of(engine)
        self._keep = keep and self._lock is not None and _can_spare(engine)
        self._kept: Connection | None = None

    @contextlib.contextmanager
    def turn(self) -> Iterator[Connection]:
        if not self._keep or self._lock is None:
            with writing(self.engine), self.engine.connect() as connection:
                yield connection
            return
        with self._lock:
            kept = self._kept
            if kept is None or kept.closed:
                kept = self._kept = self.engine.connect()
            try:
                yield kept
            finally:
                _reset(kept)

    @property
    def keeps(self) -> bool:
        """Whether a connection is kept checked out for the writes."""
        return self._kept is not None and not self._kept.closed

    def close(self) -> None:
        """Give the kept connection back to the pool (a later write takes it again)."""
        if self._lock is None or self._kept is None:
            return
        with self._lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None


def _can_spare(engine: Engine) -> bool:
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
