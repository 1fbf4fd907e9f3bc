"""Where a process's writes go: SQLite's in-process write lock, and the journal's `Writer`.

On SQLite a write transaction holds the file's one write lock. Threads of one process that
meet it wait in SQLite's busy handler, which sleeps (1, 2, 5 ... 100 ms) and leaves the file
idle between writers; so every write of a process takes a lock per database file first
(`writing`), and a thousand threads queue on it in Python, handed over the moment a commit
ends. Since the process's writes to a file take turns anyway, the journal's share one
connection, kept for the runner's life (`Writer`), instead of each checking one out of the
pool and giving it back; and the writes that queue for the lock meanwhile share the next
transaction, one fsync for them all (`group_commit`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine
from sqlalchemy.pool import QueuePool

from runner.sql import driver
from runner.sql.backend import backend_for
from runner.sql.fenced_inserts import Heard
from runner.sql.fencing import write_together
from runner.sql.group_commit import Group, Write
from runner.sql.write_alone import Made

# The most entries one shared statement writes on PostgreSQL (its rows are bound as arrays,
# one text for any number): a bound on the run rows one statement holds locked.
ROWS_TOGETHER = 256
# How many connections a PostgreSQL writer keeps: shared statements in flight at once.
WRITE_CONNECTIONS = 2

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()
_BY_ENGINE: WeakKeyDictionary[Engine, threading.Lock | None] = WeakKeyDictionary()


def _lock_of(engine: Engine) -> threading.Lock | None:
    try:
        return _BY_ENGINE[engine]
    except KeyError:
        pass
    lock = None
    if backend_for(engine.dialect.name).one_writer_per_file:
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
        self._lock = _lock_of(engine)  # SQLite's file: the process's turn to write to it
        # PostgreSQL writes several runs' entries in one statement: the connection kept for
        # it is used by one statement at a time, under a lock of this writer's own.
        self._backend = backend_for(engine.dialect.name)
        groups = self._backend.writes_runs_together
        self._turn = self._lock if self._lock is not None or not groups else threading.Lock()
        self._keep = keep and self._turn is not None and _can_spare(engine)
        self._kept: Connection | None = None
        # PostgreSQL: a few connections kept, so that a shared statement can be sent while
        # another runs (one in flight at a time kept a worker of 40 runs waiting on it).
        self._connections = _Kept(engine, _spare(engine)) if self._keep and groups else None
        # The journal's writes of a kept connection share transactions (group_commit), or on
        # PostgreSQL statements.
        together = write_together if groups else None
        self.group = Group(together, ROWS_TOGETHER) if self._keep else None

    def commit(self, write: Write) -> Heard:
        """Run a journal write in a transaction of its own, or on SQLite in the next group
        commit; returns once it has committed, with what it heard of its run."""
        if self.group is not None:
            return self.group.commit(write, self._journal_turn)
        with (
            self.turn() as connection,
            driver.Write(connection, one_statement=write.one_statement) as transaction,
        ):
            return write.run(transaction)

    def commit_alone(self, made: Made, rows: int) -> bool:
        """SQLite: a write of one statement (`made()`) that must change `rows` rows,
        committed in a transaction of its own on the kept connection, at once when no other
        write of this process is queued, being written or holding the file (a run with no
        company, the common case), in a few steps where `commit` takes many (its group, its
        `Append`), the statement made only then. True if it committed; False if it changed
        other than `rows` rows (undone) or was not tried (not SQLite's kept connection, the
        group or the file busy, statements watched): the caller then writes through
        `commit`, as it would have."""
        group, turn, begin = self.group, self._turn, self._backend.write_begins_with
        if group is None or turn is None or begin is None or self._connections is not None:
            return False
        # It leads, as a group's write with no company would: the writes that come while
        # it commits queue behind it and share the next commit (at saturation, a hundred
        # runs in one worker, they are most of them).
        if not group.lead_alone():
            return False
        try:
            # Only a turn free now: a write that would wait for it goes to the group, to
            # share the commit of the others that wait.
            if not turn.acquire(blocking=False):
                return False
            try:
                sql, parameters = made()
                connection = self._kept_connection()
                committed = driver.commit_if_changed(connection, sql, parameters, rows, begin)
            finally:
                turn.release()
        finally:
            group.hand_over()
        if not committed:
            return False
        group.wrote_alone()
        return True

    @property
    def reads_alone(self) -> bool:
        """Whether `read_alone` may take a write (PostgreSQL's kept connections)."""
        return self._connections is not None

    def read_alone(self, made: Made) -> Sequence[Any] | None:
        """PostgreSQL: a write of one statement (`made()`), its own transaction in autocommit, on a
        kept connection at once when no other write of this process is queued or being
        written and one is free: the rows the statement returns, in a few steps where
        `commit` takes many. None if not tried (not PostgreSQL's kept connections, the
        group busy, none free, statements watched): the caller then writes through
        `commit`."""
        group, kept = self.group, self._connections
        if group is None or kept is None or not group.idle():
            return None
        found = kept.read_alone(made)
        if found is not None:
            group.wrote_alone()
        return found

    def turn(self) -> AbstractContextManager[Connection]:
        """The process's turn to write and the connection to write on, as a `with` block;
        the connection given back with no transaction left open."""
        if self._keep and self._turn is not None and self._connections is None:
            return _KeptTurn(self, self._turn)  # SQLite's: every journal write, twice a step
        return self._other_turn()

    def _journal_turn(self) -> AbstractContextManager[Connection]:
        """`turn`, for the journal's own writes (driver.Write, on the driver's cursor): on
        PostgreSQL the connection is left in autocommit, where its next write finds it."""
        if self._connections is not None:
            return self._connections.turn(autocommit=True)
        return self.turn()

    @contextlib.contextmanager
    def _other_turn(self) -> Iterator[Connection]:
        if not self._keep or self._turn is None:
            with writing(self.engine), self.engine.connect() as connection:
                yield connection
            return
        assert self._connections is not None
        with self._connections.turn() as connection:
            yield connection

    def _kept_connection(self) -> Connection:
        """The connection kept for the writes (a new one if there is none or it closed);
        only with the turn held."""
        kept = self._kept
        if kept is None or kept.closed:
            kept = self._kept = self.engine.connect()
        return kept

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Every turn to write held: no journal write of this writer begins (tests queue
        writes behind it, to decide what shares a commit)."""
        if self._connections is not None:
            with self._connections.held():
                yield
            return
        assert self._turn is not None
        with self._turn:
            yield

    @property
    def keeps(self) -> bool:
        """Whether a connection is kept checked out for the writes."""
        if self._connections is not None:
            return self._connections.keeps
        return self._kept is not None and not self._kept.closed

    def close(self) -> None:
        """Give the kept connection back to the pool (a later write takes it again)."""
        if self._connections is not None:
            self._connections.close()
            return
        if self._turn is None or self._kept is None:
            return
        with self._turn:
            if self._kept is not None:
                self._kept.close()
                self._kept = None


class _KeptTurn:
    """SQLite's turn on the connection the writer keeps: the file's lock held from `with`
    to its end, the connection then reset. A class, not a generator's context manager: it
    is taken twice a step, and the generator's machinery cost more than the lock."""

    __slots__ = ("connection", "lock", "writer")

    def __init__(self, writer: Writer, lock: threading.Lock) -> None:
        self.writer = writer
        self.lock = lock

    def __enter__(self) -> Connection:
        self.lock.acquire()
        try:
            self.connection = self.writer._kept_connection()
        except BaseException:
            self.lock.release()
            raise
        return self.connection

    def __exit__(self, *_: object) -> None:
        try:
            _reset(self.connection)
        finally:
            self.lock.release()


def _can_spare(engine: Engine) -> bool:
    # A pool of one, or of a fixed few with no overflow, has no connection to spare.
    return _spare(engine) >= 1


def _spare(engine: Engine) -> int:
    """How many connections the writer may keep (up to WRITE_CONNECTIONS): all but one of
    the pool's, for the claims, the heartbeat and the reads."""
    pool = engine.pool
    if not isinstance(pool, QueuePool):
        return WRITE_CONNECTIONS
    return min(WRITE_CONNECTIONS, pool.size() + max(pool._max_overflow, 0) - 1)


class _Kept:
    """The connections a PostgreSQL writer keeps for its shared statements, each used by
    one statement at a time: checked out of the pool when first needed, given back at
    `close`."""

    def __init__(self, engine: Engine, count: int) -> None:
        self.engine = engine
        self.count = count
        self._turns = threading.BoundedSemaphore(count)
        self._guard = threading.Lock()  # guards the lists, held briefly
        self._idle: list[Connection] = []
        self._all: list[Connection] = []

    @contextlib.contextmanager
    def turn(self, *, autocommit: bool = False) -> Iterator[Connection]:
        """A kept connection, for one statement at a time. `autocommit`: for the journal's
        writes, which leave it so between them (a connection switches only when the kind
        of turn changes); any other turn has it as the pool gives it, a transaction begun
        by its first statement."""
        with self._turns:
            with self._guard:
                kept = self._idle.pop() if self._idle else None
            if kept is None or kept.closed:
                kept = self.engine.connect()
                with self._guard:
                    self._all = [c for c in self._all if not c.closed] + [kept]
            try:
                _switch_autocommit(kept, autocommit)
                yield kept
            finally:
                _reset(kept)
                with self._guard:
                    self._idle.append(kept)

    def read_alone(self, made: Made) -> Sequence[Any] | None:
        """One statement (`made()`) in autocommit (its own transaction) on a kept connection
        free now and left in autocommit by the journal's last write: the rows it returns.
        None, untried, if none is (all busy, or another turn has one out of autocommit), or
        its statements are watched."""
        if not self._turns.acquire(blocking=False):
            return None
        try:
            with self._guard:
                kept = self._idle.pop() if self._idle else None
            if kept is None:
                return None
            try:
                if kept.closed:  # `turn` makes its successor
                    return None
                return driver.read_if_unwatched(kept, made)
            finally:
                _reset(kept)
                with self._guard:
                    self._idle.append(kept)
        finally:
            self._turns.release()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        for _ in range(self.count):
            self._turns.acquire()
        try:
            yield
        finally:
            for _ in range(self.count):
                self._turns.release()

    @property
    def keeps(self) -> bool:
        return any(not connection.closed for connection in self._all)

    def close(self) -> None:
        with self.held(), self._guard:
            for connection in self._all:
                # Back to the pool, whose checkin takes it out of autocommit
                # (runner.sql.backend: as for one given back without this close).
                connection.close()
            self._all, self._idle = [], []


def _switch_autocommit(connection: Connection, autocommit: bool) -> None:
    """Put the driver connection beneath `connection` in (or out of) autocommit, if it is
    not already, between transactions (psycopg refuses the switch inside one)."""
    if connection.invalidated or connection.closed:
        return
    dbapi_connection: Any = connection.connection.dbapi_connection
    if dbapi_connection is None or dbapi_connection.autocommit == autocommit:
        return
    _reset(connection)
    dbapi_connection.autocommit = autocommit


def _reset(connection: Connection) -> None:
    """What giving the connection back to the pool would do: end any transaction left open
    (a write that failed half way), so the kept connection never holds the file's lock."""
    if connection.invalidated or connection.closed:
        return
    if connection.in_transaction():
        connection.rollback()
    dbapi_connection = connection.connection.dbapi_connection
    if dbapi_connection is None:
        return
    open_ = getattr(dbapi_connection, "in_transaction", None)  # sqlite3's
    if open_ is None:  # psycopg's: a transaction status other than idle
        open_ = dbapi_connection.info.transaction_status != 0
    if open_:
        dbapi_connection.rollback()
