"""Group commit: the journal writes of a process's runs share commits, on SQLite in one
transaction (and so one fsync), on PostgreSQL in one statement.

On SQLite a process's writes to a file take turns on its lock (runner.sql.writer), and
each commit waits for the disk (WAL, `synchronous=FULL`): one run at a time, a commit is
the whole cost of a write. So while one write commits, the runs that come to write meanwhile
queue up, and the next of them to get the turn writes every queued entry in ONE transaction:
its own and the others' (the leader; no thread of its own). A run alone never waits for
company: its write is the transaction it always was.

On PostgreSQL the writes go the same way, on the one connection the writer keeps, but the
queued entries (the writes of entries alone, and runs' last writes with their ends: no park
or charge) go in ONE statement in autocommit (`Together`: runner.sql.fencing.write_together),
one round trip and one statement's worth of the worker's CPU for them all; what is left (a
park, a charge) is written after it, each in a transaction of its own as without a group.

What each run is promised, as with a commit of its own:
- It goes on only after the commit that holds its entry: a run's `commit` returns (or
  raises) only once the transaction holding its write has committed (or failed). A crash
  before that COMMIT (before the statement, on PostgreSQL) loses the whole of it and no run
  has gone on past it.
- Fencing is per run: on SQLite each write is its own fenced statement in the shared
  transaction, and BEGIN IMMEDIATE holds the file's lock from the first statement to the
  COMMIT, so no claim by another process comes between a run's fence and its commit; on
  PostgreSQL the statement fences each run's rows by that run's epoch, under its row lock.
- A failed write fails exactly the runs whose entries it held. A write that the database
  refuses (fenced out: LeaseLost; a duplicate entry; a value it cannot store) fails its own
  run; the transaction is rolled back and the other writes go again in a new one (they were
  never acknowledged, so nothing is written twice). On PostgreSQL a run fenced out is told
  by the statement (none of its rows went in) and fails alone; a statement refused for any
  other reason is rolled back whole, and its writes go again each alone. A failure of the
  transaction itself (its BEGIN, its COMMIT, a lost connection) fails every write it held,
  each run's own retry then deciding what to do (runner.sql.journal).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sqlalchemy import Connection

from runner.core.faults import fault
from runner.errors import LeaseLost
from runner.sql import driver
from runner.sql.database_failures import transient
from runner.sql.fenced_inserts import Heard


class Write(Protocol):
    """A journal write, its statements ready to run in any transaction, more than once
    (runner.sql.fencing.Append)."""

    @property
    def one_statement(self) -> bool: ...

    @property
    def together(self) -> tuple[tuple[Any, ...], ...] | None:
        """Its rows, if it may share ONE statement with other runs' (`Together`)."""
        ...

    def run(self, write: driver.Write) -> Heard: ...


# Writes several runs' entries in one statement, each fenced by its own run's epoch: what
# each heard of its run, or None for a run fenced out (runner.sql.fencing.write_together).
Together = Callable[[driver.Write, Sequence[Any]], list[Heard | None]]


class _Request:
    """One run's write, queued, and what became of it. Its thread waits on a bare lock of
    its own (released when the write is done, or when the thread is to lead): a finished
    transaction wakes exactly the runs it held, none of them through the file's lock."""

    __slots__ = ("error", "finished", "result", "wake", "write")

    def __init__(self, write: Write) -> None:
        self.write = write
        self.finished = False
        self.result = Heard(False, 0)
        self.error: BaseException | None = None
        # Made only for a write that waits (a leader never does), under the queue's lock,
        # so it exists before any leader can finish the write.
        self.wake: threading.Lock | None = None

    def waits(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()

    def wake_up(self) -> None:
        if self.wake is not None:
            self.wake.release()

    def succeed(self, result: Heard) -> None:
        self.result, self.finished = result, True
        self.wake_up()

    def fail(self, error: BaseException) -> None:
        self.error, self.finished = error, True
        self.wake_up()

    def outcome(self) -> Heard:
        if self.error is not None:
            raise self.error
        return self.result


class Group:
    """The writes queued for a file's turn, written together by one thread at a time: the
    leader, which takes the whole queue into one transaction, then hands the lead to the
    oldest write queued meanwhile (or leaves none, and the next write to come leads)."""

    def __init__(self, together: Together | None = None, rows: int = 64) -> None:
        # PostgreSQL: the writes queued go in ONE statement (in autocommit, one round trip)
        # rather than one transaction of a statement each (`_statement`), at most `rows`
        # rows a statement.
        self._together = together
        self._rows = rows
        self._queue: list[_Request] = []
        self._leading = False  # whether a thread leads now (guarded by _queued)
        self._queued = threading.Lock()  # guards the queue and the lead, held briefly
        # Transactions committed and the writes they held (benchmarks, tests).
        self.transactions = 0
        self.writes = 0

    def queued(self) -> int:
        """How many writes wait for a transaction now (tests wait on it)."""
        return len(self._queue)

    def idle(self) -> bool:
        """Whether no write is queued or being written now (read without the lock: a write
        that comes just after meets the file's lock, as any other, and waits its turn)."""
        return not self._leading and not self._queue

    def lead_alone(self) -> bool:
        """Take the lead if no write is queued or being written now: the caller writes its
        own write alone, then calls `hand_over`, and the writes that came meanwhile queue
        for the next leader, to share its transaction, as behind any leader."""
        with self._queued:
            if self._leading or self._queue:
                return False
            self._leading = True
            return True

    def wrote_alone(self) -> None:
        """Count a write that went straight to its statement (the writer's), as one
        transaction of one write."""
        self.transactions += 1
        self.writes += 1

    def commit(self, write: Write, turn: Callable[[], AbstractContextManager[Connection]]) -> Heard:
        """Write `write` in the next transaction, alone or with others; once it has
        committed, what the write heard of its run (its cancel flag, its messages).

        `turn` is the writer's: the file's lock held and the connection to write on (kept
        for the runner's life), given back in a clean state when the block ends."""
        request = _Request(write)
        with self._queued:
            self._queue.append(request)
            lead = not self._leading
            self._leading = True
            if not lead:
                request.waits()
        if not lead:
            assert request.wake is not None
            request.wake.acquire()  # written by a leader, or handed the lead
            if request.finished:
                return request.outcome()
        batch: list[_Request] = []
        handed = False
        try:
            with turn() as connection:
                # The queue as it is once the file is this process's: every write that came
                # while the turn was awaited goes in too.
                with self._queued:
                    batch, self._queue = self._queue, []
                if self._together is not None:
                    # PostgreSQL: the writer keeps more than one connection, so the next
                    # leader may gather the writes that come meanwhile and send them on
                    # another while this statement runs (each run's writes are one at a
                    # time: no run has two in flight).
                    self.hand_over()
                    handed = True
                    # Each write left after the shared statements is a transaction of its
                    # own, as without a group: several runs' rows locked in one transaction
                    # of several statements could deadlock with the heartbeat's renewal.
                    alone = self._statements(connection, batch) if len(batch) > 1 else batch
                    for one in alone:
                        self._transaction(connection, [one])
                remaining = batch if self._together is None else []
                while remaining:
                    remaining = self._transaction(connection, remaining)
        except BaseException as exc:
            # The turn itself failed (no connection), or this thread was interrupted: every
            # write it leads fails, none is left unanswered.
            if not batch:
                with self._queued:
                    batch, self._queue = self._queue, []
            interrupted = RuntimeError("the group commit of this write was interrupted")
            error = exc if isinstance(exc, Exception) else interrupted
            for other in batch:
                if not other.finished:
                    other.fail(error)
            if not isinstance(exc, Exception):
                raise
        finally:
            if not handed:
                self.hand_over()
        return request.outcome()

    def hand_over(self) -> None:
        """Give the lead to the oldest write queued while this transaction (or a write led
        alone: `lead_alone`) ran, if any."""
        with self._queued:
            if not self._queue:
                self._leading = False
                return
            successor = self._queue[0]
        successor.wake_up()  # queued while a thread led: a write that waits

    def _statements(self, connection: Connection, requests: list[_Request]) -> list[_Request]:
        """The writes that may share a statement, in as few statements as their rows allow,
        each its own transaction; the requests left to write each in a transaction of its
        own (those that may not, and those of a statement that failed)."""
        alone: list[_Request] = []
        chunk: list[_Request] = []
        rows = 0
        for request in requests:
            together = request.write.together
            if together is None:
                alone.append(request)
                continue
            if chunk and rows + len(together) > self._rows:
                alone += self._statement(connection, chunk)
                chunk, rows = [], 0
            chunk.append(request)
            rows += len(together)
        if len(chunk) > 1:
            alone += self._statement(connection, chunk)
        else:
            alone += chunk
        # Each alone: `_transaction` of one request is exactly a write of its own.
        return [request for request in alone if not request.finished]

    def _statement(self, connection: Connection, requests: list[_Request]) -> list[_Request]:
        """ONE statement of `requests` (its own transaction); the requests to write again,
        each alone, if it failed for a reason one of them may own (a duplicate entry, a value
        refused): written alone, each fails or commits by itself."""
        assert self._together is not None
        if len(requests) == 1:
            return requests
        try:
            with driver.Write(connection, one_statement=True) as write:
                # Every row ready, nothing sent: a crash here loses them all, and no run
                # has gone on past its entry.
                fault("before_group_commit")
                heard = self._together(write, [request.write for request in requests])
        except Exception as exc:
            if _lost(connection, exc):
                for request in requests:
                    request.fail(exc)
                return []
            return requests
        self.transactions += 1
        self.writes += len(requests)
        for request, result in zip(requests, heard, strict=True):
            if result is None:
                run_id = getattr(request.write, "run_id", "?")
                taken = f"run {run_id} was taken over by another worker: not writing"
                request.fail(LeaseLost(taken))
            else:
                request.succeed(result)
        return []

    def _transaction(self, connection: Connection, requests: list[_Request]) -> list[_Request]:
        """One transaction of `requests`; the requests to try again in another (when one of
        them was refused, the others were not: they go again without it)."""
        if len(requests) == 1:
            self._alone(connection, requests[0])
            return []
        results: list[Heard] = []
        culprit: _Request | None = None
        try:
            with driver.Write(connection) as write:
                for request in requests:
                    try:
                        results.append(request.write.run(write))
                    except Exception:
                        culprit = request
                        raise
                # Every statement run, nothing committed: a crash here loses them all, and
                # no run has gone on past its entry.
                fault("before_group_commit")
        except Exception as exc:
            if culprit is None or _lost(connection, exc):
                for request in requests:
                    request.fail(exc)
                return []
            culprit.fail(exc)
            return [request for request in requests if request is not culprit]
        self.transactions += 1
        self.writes += len(requests)
        for request, result in zip(requests, results, strict=True):
            request.succeed(result)
        return []

    def _alone(self, connection: Connection, request: _Request) -> None:
        """A transaction of one write, the common case (a run with no company): as
        `_transaction`, in fewer steps. It fails alone, or commits."""
        write = request.write
        try:
            with driver.Write(connection, one_statement=write.one_statement) as statements:
                result = write.run(statements)
        except Exception as exc:
            request.fail(exc)
            return
        self.transactions += 1
        self.writes += 1
        request.succeed(result)


def _lost(connection: Connection, exc: BaseException) -> bool:
    """Whether the connection itself failed (not one write's statement): the others would
    fail alike, so each run retries on its own."""
    return connection.invalidated or transient(exc)
