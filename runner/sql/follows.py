"""Followers of runs wait for a word that the run moved, from ONE watcher per process.

A follower (`Runner.events(follow=True)`, `runner tail --follow`, the API's SSE stream)
registers with its store's `Followers` and sleeps until woken; only then does it read the
journal (and deltas, and the run's row). What wakes it is shared by every follower of the
process, so an idle follower costs the database nothing of its own:

- PostgreSQL: one LISTEN on `runner_follow` (the `Listener` thread of runner.sql.wakeup),
  and one transaction every MARK_REFRESH_SECONDS that keeps the marks (`follows` rows) of all
  the process's followed runs alive for MARK_SECONDS. Triggers (revision 0017) NOTIFY the
  run's id in the transaction of every write to a followed run's journal or deltas, and of
  every change of its status (finishing, waiting). Unfollowed runs pay one probe of
  `follows` a statement and no NOTIFY: PostgreSQL serialises the commits of notifying
  transactions (8 writers with a NOTIFY in each of their journal writes managed 4 to 5
  times fewer a second), so only runs somebody watches pay it. Triggers rather than a
  NOTIFY folded into the fenced CTE: every writer of the journal (answers, messages,
  budget changes, finishes, forks, deltas, any to come) is covered without its own copy.
  Measured (benchmarks/follow_notify.py, docs/performance/latency.md): the trigger function runs
  about 24 us a write of an unfollowed run, under 1 % of a fenced write on this machine,
  and 8 writers of unfollowed runs kept 0.82 to 1.03 of their rate without it (a loaded
  2-core machine: the rounds move more than that). Statement-level rather than a row
  trigger: a row trigger's function ran 18.5 us a write against 38 in the same (loaded)
  run, but it runs once per row, and a fork copies thousands of entries in one statement.
- SQLite: no notifications. One thread per process probes `PRAGMA data_version` on a read
  connection of its own every `poll_seconds` of the most eager follower (EVENT_POLL_SECONDS,
  0.25 s; DELTA_POLL_SECONDS, 0.05 s, with deltas): the number changes when another
  connection commits. Only then does one query read the last position, last delta id and
  status of every followed run, and the followers of the runs that moved are woken.

Why no write is missed on PostgreSQL (tests/integration/test_follows.py races them). A
follower registers, waits until the listener LISTENs, marks its run, and only then reads.
The mark's transaction first takes FOR SHARE locks on the runs' rows, and every writer of a
run's journal or status holds that row locked (FOR UPDATE, or the fenced UPDATE) from
before its insert until it commits. So either (a) the writer locked the row first: the mark
waits for the writer's commit, and the follower's read, after the mark, sees the write; or
(b) the mark committed first: the writer's trigger runs after its lock was granted, in a
snapshot of its own (a VOLATILE function's query, in READ COMMITTED) that sees the mark, and
the NOTIFY is sent at the writer's commit, which the LISTEN (open before the mark) hears. A
write whose statement began before the mark but locked the row after it is case (b): the
trigger's snapshot is taken when it fires, not when the statement began. A mark of several
runs never waits for a row while holding another: it marks at once the runs no writer
holds (FOR SHARE SKIP LOCKED), then each held one in a transaction of its own, waiting for
that writer alone; a writer that locks runs in an order of its own (a child's write, then
its ancestors' spend) would otherwise deadlock with it. Deltas are written
without the run's lock: one that commits during a mark may go unannounced, and the next
batch (50 ms later) or the call's action announces it (they are ephemeral; nothing is
lost). After the listener (re)connects it marks every run again and wakes every follower,
who reads what was written while nobody listened; so does a renewal that succeeds after one
failed, or that ends after the marks it renews had expired (a write meanwhile went
unannounced).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from runner.errors import first_line
from runner.sql.backend import FOLLOW_CHANNEL, backend_for
from runner.sql.wakeup import Listener
from runner.store.follow import Follow

# How long a mark keeps a run's writes notifying, and how often the process renews all of
# its marks (one transaction): a third of the way, so a slow renewal is never late.
MARK_SECONDS = 60.0
MARK_REFRESH_SECONDS = 20.0
# After a renewal failed, how soon the listener tries again.
MARK_RETRY_SECONDS = 1.0
# How long a new follower waits for the listener to LISTEN before it polls on its own.
LISTEN_WAIT_SECONDS = 10.0

# The rows no writer holds, locked at once; and one row, waiting out its writer (see the
# module's doc: a mark never waits while it holds another run's row).
_MARK_FREE_ROWS = text("SELECT id FROM runs WHERE id = ANY(:ids) FOR SHARE SKIP LOCKED")
_MARK_ROW = text("SELECT id FROM runs WHERE id = :id FOR SHARE")
_MARK = text(
    "INSERT INTO follows (run_id, followed_until) "
    "SELECT id, now() + make_interval(secs => :seconds) FROM unnest(CAST(:ids AS text[])) AS id "
    "ON CONFLICT (run_id) DO UPDATE "
    "SET followed_until = GREATEST(follows.followed_until, EXCLUDED.followed_until)"
)
# Rows another process's mark holds are left to a later mark: two marks never deadlock.
_FORGET_EXPIRED = text(
    "DELETE FROM follows WHERE run_id IN (SELECT run_id FROM follows "
    "WHERE followed_until < now() FOR UPDATE SKIP LOCKED)"
)


def mark(engine: Engine, run_ids: list[str], seconds: float = MARK_SECONDS) -> None:
    """Mark the runs followed for `seconds` more (PostgreSQL): ONE transaction for all the
    runs no writer holds, which also forgets every mark (of any process) that has expired,
    then one for each run a writer holds, once that writer has committed."""
    if not run_ids:
        return
    ids = sorted(set(run_ids))
    with engine.begin() as connection:
        free = set(connection.execute(_MARK_FREE_ROWS, {"ids": ids}).scalars())
        held = [run_id for run_id in ids if run_id not in free]  # or no such run
        if free:
            connection.execute(_MARK, {"ids": sorted(free), "seconds": seconds})
        connection.execute(_FORGET_EXPIRED)
    for run_id in held:
        with engine.begin() as connection:
            connection.execute(_MARK_ROW, {"id": run_id})
            connection.execute(_MARK, {"ids": [run_id], "seconds": seconds})


# SQLite: what moves when a run is written, for every followed run, in one query.
_POSITIONS = (
    "SELECT runs.id, runs.status,"
    " (SELECT max(seq) FROM entries WHERE entries.run_id = runs.id),"
    " (SELECT max(id) FROM deltas WHERE deltas.run_id = runs.id)"
    " FROM runs WHERE runs.id IN ({})"
)


class Followers:
    """Every follower of one store's runs in this process, and the one watcher that wakes
    them (a listener on PostgreSQL, a poller on SQLite), started with the first follower."""

    def __init__(
        self,
        engine: Engine,
        *,
        log: Callable[[str], None] | None = None,
        mark_seconds: float = MARK_SECONDS,
        refresh_seconds: float = MARK_REFRESH_SECONDS,
    ) -> None:
        self.engine = engine
        self.log = log or (lambda line: None)
        self.mark_seconds = mark_seconds
        self.refresh_seconds = refresh_seconds
        self.notifies = backend_for(engine.dialect.name).notifies
        self._lock = threading.Lock()
        self._runs: dict[str, set[Follow]] = {}
        self._listener: _FollowListener | None = None
        self._poller: _Poller | None = None
        self._closed = False

    def follow(self, run_id: str, poll_seconds: float) -> Follow | None:
        """Register a follower of `run_id` before its first read; None if the watcher
        cannot serve it (the listener did not come up, or the run cannot be marked: the
        caller polls on its own)."""
        follow = Follow(self, run_id, poll_seconds)
        with self._lock:
            if self._closed:
                return None
            self._runs.setdefault(run_id, set()).add(follow)
            watcher = self._start()
        if isinstance(watcher, _Poller):
            watcher.changed()
            return follow
        if not watcher.listening.wait(LISTEN_WAIT_SECONDS):
            self.unfollow(follow)
            return None
        try:
            mark(self.engine, [run_id], self.mark_seconds)
        except SQLAlchemyError as exc:
            # Say, a role that may not write `follows`: this follower polls on its own.
            self.log(f"cannot mark run {run_id} followed, polling it: {first_line(exc)}")
            self.unfollow(follow)
            return None
        return follow

    def unfollow(self, follow: Follow) -> None:
        """Forget a follower (its run's mark expires by itself once nobody renews it)."""
        with self._lock:
            follows = self._runs.get(follow.run_id)
            if follows is not None:
                follows.discard(follow)
                if not follows:
                    del self._runs[follow.run_id]

    def run_ids(self) -> list[str]:
        with self._lock:
            return list(self._runs)

    def wake(self, run_ids: list[str] | None = None) -> None:
        """Wake the followers of `run_ids` (None: of every run)."""
        with self._lock:
            if run_ids is None:
                chosen = [follow for follows in self._runs.values() for follow in follows]
            else:
                chosen = [f for run_id in set(run_ids) for f in self._runs.get(run_id, ())]
        for follow in chosen:
            follow.wake()

    def poll_seconds(self) -> float | None:
        """How often the most eager follower wants a look (None: nobody follows)."""
        with self._lock:
            seconds = [f.poll_seconds for follows in self._runs.values() for f in follows]
        return min(seconds, default=None)

    @property
    def watcher(self) -> _FollowListener | _Poller | None:
        """The listener (PostgreSQL) or poller (SQLite), once a follower started it."""
        return self._listener or self._poller

    def close(self) -> None:
        with self._lock:
            self._closed = True
            listener, poller = self._listener, self._poller
        if listener is not None:
            listener.close()
        if poller is not None:
            poller.close()
        self.wake()  # nobody sleeps on a watcher that is gone

    def _start(self) -> _FollowListener | _Poller:
        # Under self._lock.
        if self.notifies:
            if self._listener is None:
                self._listener = _FollowListener(self)
                self._listener.start()
            return self._listener
        if self._poller is None:
            self._poller = _Poller(self)
            self._poller.start()
        return self._poller


class _FollowListener(Listener):
    """PostgreSQL: hears the followed runs' writes, and renews their marks."""

    channel = FOLLOW_CHANNEL
    purpose = "followed runs"

    def __init__(self, followers: Followers) -> None:
        super().__init__(followers.engine, log=followers.log)
        self.followers = followers
        self.marked_at = 0.0
        self.marks = 0  # transactions that renewed marks (for tests and benchmarks)
        self._lapsed = False  # a renewal failed: wake every follower once one succeeds
        # When the last renewal that succeeded began (its marks live MARK_SECONDS from then).
        self._renewed_at: float | None = None

    def connected(self) -> None:
        # Marks may have lapsed, and writes gone unheard, while nobody listened: mark again,
        # then every follower reads what it missed.
        self._mark(wake=True)

    def heard(self, payloads: list[str]) -> None:
        self.followers.wake(payloads)

    def tick(self) -> None:
        if time.monotonic() - self.marked_at >= self.followers.refresh_seconds:
            self._mark()

    def _mark(self, *, wake: bool = False) -> None:
        run_ids = self.followers.run_ids()
        self.marked_at = started = time.monotonic()
        try:
            if run_ids:
                mark(self.engine, run_ids, self.followers.mark_seconds)
                self.marks += 1
        except SQLAlchemyError as exc:
            # Try again soon; meanwhile a mark may lapse and a write go unannounced, so
            # once marked again every follower reads what it may have missed.
            self.log(f"cannot renew the marks of followed runs: {first_line(exc)}")
            self.marked_at -= self.followers.refresh_seconds - MARK_RETRY_SECONDS
            self._lapsed = True
        else:
            # A renewal that ends after the last one's marks expired (this thread held up:
            # its mark waited that long for a run's row, say) may have let a write go
            # unannounced, as a failed one may.
            late = (
                self._renewed_at is not None
                and time.monotonic() - self._renewed_at > self.followers.mark_seconds
            )
            wake = wake or self._lapsed or late
            self._lapsed = False
            self._renewed_at = started
        if wake:
            self.followers.wake()


class _Poller:
    """SQLite: one probe of `PRAGMA data_version` per interval for the whole process, and
    one query of the followed runs' positions only when another connection committed."""

    def __init__(self, followers: Followers) -> None:
        self.followers = followers
        self.probes = 0  # PRAGMA data_version statements (for tests and benchmarks)
        self.queries = 0  # position queries
        self._seen: dict[str, tuple[Any, ...]] = {}
        self._version: int | None = None
        self._new_runs = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runner-follow", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def changed(self) -> None:
        """A run was just followed: look at once, whatever the data version says."""
        self._new_runs.set()

    def close(self) -> None:
        self._stop.set()
        self._new_runs.set()
        self._thread.join()

    def _run(self) -> None:
        connection: Any = None
        while not self._stop.is_set():
            interval = self.followers.poll_seconds()
            if interval is None:  # nobody follows: sleep until somebody does
                self._new_runs.wait()
                self._new_runs.clear()
                continue
            try:
                if connection is None:
                    # A connection of the pool's, kept: data_version counts the commits of
                    # OTHER connections, so it must be this one's every time. Autocommit
                    # (the engine's connections leave transactions to runner): no BEGIN.
                    connection = self.followers.engine.raw_connection()
                    self._version = None
                self._look(connection)
            except Exception as exc:
                self.followers.log(f"cannot look at followed runs: {first_line(exc)}")
                if connection is not None:
                    with contextlib.suppress(Exception):
                        connection.invalidate()
                    connection = None
            if self._new_runs.wait(interval):
                self._new_runs.clear()
        if connection is not None:
            connection.close()

    def _look(self, connection: Any) -> None:
        cursor = connection.cursor()
        try:
            (version,) = cursor.execute("PRAGMA data_version").fetchone()
            self.probes += 1
            run_ids = self.followers.run_ids()
            new = [run_id for run_id in run_ids if run_id not in self._seen]
            if version == self._version and not new:
                return
            self._version = version
            for gone in set(self._seen) - set(run_ids):
                del self._seen[gone]
            if not run_ids:
                return
            query = _POSITIONS.format(", ".join("?" * len(run_ids)))
            rows = cursor.execute(query, run_ids).fetchall()
            self.queries += 1
        finally:
            cursor.close()
        moved = []
        for row in rows:
            run_id, *where = row
            if self._seen.get(run_id) != tuple(where):
                self._seen[run_id] = tuple(where)
                moved.append(run_id)
        if moved:
            self.followers.wake(moved)
