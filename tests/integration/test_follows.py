"""Followers wait on one watcher per process, not on polls of their own: an idle follower
issues no statement; on PostgreSQL a followed run's write NOTIFYs (an unfollowed one's
does not), a mark is renewed and expires, a listener that reconnects makes every follower
read again, and a write racing a follower's mark is either announced or read; on SQLite
the one poller wakes the followers of the runs that moved, and only those."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, event, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import Pool

from runner import Event, Runner
from runner.core.status import RunStatus
from runner.sql import reads
from runner.sql.backend import backend_for
from runner.sql.follows import Followers, _Poller, mark
from runner.sql.schema import entries, follows
from runner.store.follow import Follow
from tests.conditions import scaled, wait_until

from .agents import shop

HEARD = 10.0  # seconds a notification may take to arrive: far more than it needs
QUIET = 0.5  # seconds of silence that show nothing was announced (or asked)


class Statements:
    """Counts the statements sent through SQLAlchemy and the plain reads beneath it (by any
    engine of this process), and the pool's checkouts (each ends with a rollback)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        event.listen(Engine, "before_cursor_execute", self._one)
        event.listen(Pool, "checkout", self._one)
        each = reads.Reader.each

        def counted(reader: Any, *args: Any, **kwargs: Any) -> Any:
            self._one()
            return each(reader, *args, **kwargs)

        monkeypatch.setattr(reads.Reader, "each", counted)

    def _one(self, *_: Any) -> None:
        self.count += 1

    def close(self) -> None:
        event.remove(Engine, "before_cursor_execute", self._one)
        event.remove(Pool, "checkout", self._one)


def _follow_in_thread(runner: Runner, run_id: str) -> tuple[list[Event], threading.Thread]:
    got: list[Event] = []
    stream = runner.events(run_id, follow=True)

    def follow() -> None:
        got.extend(stream)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return got, thread


def test_an_idle_follower_issues_no_statement_and_wakes_on_a_write(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Runner(db_url) as worker, Runner(db_url) as follower:
        worker.run(shop, "refund", id="r1")  # waits for a person: idle, not finished
        waiting = len(list(worker.events("r1")))
        got, thread = _follow_in_thread(follower, "r1")
        wait_until(lambda: len(got) == waiting, what="the entries so far")
        followers = follower.store.followers
        # After the entries the follower looks again (finding nothing, reading the run's
        # row), and on SQLite the poller's first look wakes it once more: idle is once
        # those are done and it waits for a wake that has not come.
        watcher = followers.watcher
        if isinstance(watcher, _Poller):
            wait_until(lambda: watcher.queries >= 1, what="the poller's first look")
            looked = watcher.probes  # a later probe: the look that woke it is over
            wait_until(lambda: watcher.probes > looked, what="the poller's next probe")
        wait_until(lambda: _parked(thread), what="the follower to wait for a wake")
        statements = Statements(monkeypatch)
        try:
            threading.Event().wait(QUIET)  # idle: the follower asks nothing of its own
            assert statements.count == 0
            worker.approve("r1")
            worker.resume("r1")  # runs to its end in this thread
            thread.join(HEARD)
            assert not thread.is_alive()  # woken, read, and ended with the run
            assert statements.count > 0
        finally:
            statements.close()
        assert [e.position for e in got] == list(range(len(list(worker.events("r1")))))
        if isinstance(watcher, _Poller):
            assert watcher.probes > 0  # SQLite: the one poller looked, on its own connection


def _parked(thread: threading.Thread) -> bool:
    """Whether `thread` waits in `Follow.wait` for a wake that has not come yet."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code is Follow.wait.__code__:
            return bool(frame.f_locals["self"].seen() == frame.f_locals["seen"])
        frame = frame.f_back
    return False


def test_the_poller_or_listener_wakes_the_followers_of_the_run_that_moved(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(shop, "refund", id="a")
        runner.run(shop, "refund", id="b")
        followers = runner.store.followers
        a = followers.follow("a", 0.01)
        b = followers.follow("b", 0.01)
        assert a is not None and b is not None
        try:
            # SQLite's poller wakes each new follower once it has its run's position.
            if not followers.notifies:
                wait_until(lambda: a.seen() > 0 and b.seen() > 0, what="the first look")
            seen_a, seen_b = a.seen(), b.seen()
            runner.approve("a")
            assert a.wait(seen_a, HEARD)
            threading.Event().wait(QUIET)
            assert b.seen() == seen_b
        finally:
            a.close()
            b.close()


def test_a_closed_stream_stops_waiting(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(shop, "refund", id="c")
        stream = runner.events("c", follow=True)
        got: list[Event] = []
        thread = threading.Thread(target=lambda: got.extend(stream), daemon=True)
        thread.start()
        wait_until(lambda: got, what="the first entries")
        stream.close()
        thread.join(HEARD)
        assert not thread.is_alive()
        assert not runner.store.followers.run_ids()  # unregistered


# -- PostgreSQL: notifications ---------------------------------------------------------------


@pytest.fixture
def pg_url(postgres_database: str) -> Iterator[str]:
    with Runner(postgres_database) as runner, runner.engine.begin() as connection:
        connection.execute(text("TRUNCATE runs, entries, follows CASCADE"))
    yield postgres_database


@pytest.fixture
def heard(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection that LISTENs on runner_follow, as the process's listener does."""
    url = make_url(pg_url).set(drivername="postgresql")
    connection = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
    connection.execute("LISTEN runner_follow")
    yield connection
    connection.close()


def _payloads(connection: psycopg.Connection[Any], timeout: float) -> list[str]:
    return [n.payload for n in connection.notifies(timeout=timeout, stop_after=1)]


@pytest.mark.postgres
def test_only_a_followed_runs_writes_notify(pg_url: str, heard: psycopg.Connection[Any]) -> None:
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="quiet")  # writes entries, waits: nobody follows
        assert _payloads(heard, QUIET) == []
        mark(runner.engine, ["quiet"])
        runner.approve("quiet")  # an answer (an entry) and a new status
        assert _payloads(heard, HEARD) == ["quiet"]


@pytest.mark.postgres
def test_a_mark_expires_and_is_forgotten(pg_url: str, heard: psycopg.Connection[Any]) -> None:
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="old")
        mark(runner.engine, ["old"], seconds=-1.0)  # already past: as if never renewed
        runner.approve("old")
        assert _payloads(heard, QUIET) == []
        mark(runner.engine, ["other"])  # any mark forgets the expired ones
        with runner.engine.connect() as connection:
            left = connection.execute(select(follows.c.run_id)).scalars().all()
        assert left == ["other"]


@pytest.mark.postgres
def test_an_expired_mark_still_in_the_table_stops_notifying(
    pg_url: str, heard: psycopg.Connection[Any]
) -> None:
    """Expired marks are forgotten only by the next mark: until then the triggers pass over
    them by their time (a mark's forgetting is not what silences it)."""
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="old")
        runner.run(shop, "refund", id="live")
        with runner.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO follows (run_id, followed_until) VALUES "
                    "('old', now() - interval '1 second'), ('live', now() + interval '1 minute')"
                )
            )
        runner.approve("old")  # an answer (an entry) and a new status
        assert _payloads(heard, QUIET) == []
        runner.approve("live")
        assert _payloads(heard, HEARD) == ["live"]
        with runner.engine.connect() as connection:
            left = set(connection.execute(select(follows.c.run_id)).scalars())
        assert left == {"old", "live"}  # the expired mark was there all along


@pytest.mark.postgres
def test_the_listener_renews_its_runs_marks(pg_url: str) -> None:
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="kept")
        followers = Followers(runner.engine, mark_seconds=3600, refresh_seconds=0.0)
        try:
            watched = followers.follow("kept", 0.25)
            assert watched is not None

            def until() -> Any:
                with runner.engine.connect() as connection:
                    return connection.execute(select(follows.c.followed_until)).scalar_one()

            first = until()
            wait_until(lambda: until() > first, what="a renewed mark")
            watcher = followers.watcher
            assert watcher is not None and getattr(watcher, "marks", 0) >= 1
        finally:
            followers.close()


@pytest.mark.postgres
def test_a_renewal_that_comes_after_the_marks_expired_wakes_every_follower(pg_url: str) -> None:
    # The listener's thread held up past the marks' life (here: renewing every 3 s marks
    # that live 0.2 s): a write meanwhile was not announced, so the renewal wakes them.
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="lapse")
        followers = Followers(runner.engine, mark_seconds=0.2, refresh_seconds=3.0)
        try:
            watched = followers.follow("lapse", 0.25)
            assert watched is not None
            seen = watched.seen()

            def live_marks() -> int:
                with runner.engine.connect() as connection:
                    return int(
                        connection.execute(
                            text("SELECT count(*) FROM follows WHERE followed_until > now()")
                        ).scalar_one()
                    )

            wait_until(lambda: live_marks() == 0, what="the mark to expire")
            runner.approve("lapse")  # unannounced: nobody's mark is live
            assert watched.wait(seen, HEARD)  # the late renewal woke it
            assert getattr(followers.watcher, "marks", 0) >= 1
        finally:
            followers.close()


@pytest.mark.postgres
def test_a_failed_renewal_is_retried_within_seconds_and_its_success_wakes_every_follower(
    pg_url: str,
) -> None:
    """A renewal that fails (here: the listener reconnects while `follows` is away) is
    tried again a second later, not at the next refresh (ten minutes here); the one that
    then succeeds wakes every follower, since a mark may have lapsed meanwhile."""
    logged: list[str] = []
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="retry")
        followers = Followers(
            runner.engine, mark_seconds=3600, refresh_seconds=600, log=logged.append
        )
        try:
            watched = followers.follow("retry", 0.25)
            listener = followers.watcher
            assert watched is not None and listener is not None
            renewed = getattr(listener, "marks", 0)
            seen = watched.seen()
            with runner.engine.begin() as connection:
                connection.execute(text("ALTER TABLE follows RENAME TO follows_away"))
            try:
                with runner.engine.begin() as connection:
                    connection.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE query LIKE 'LISTEN runner_follow%' "
                            "AND pid <> pg_backend_pid() AND datname = current_database()"
                        )
                    )
                wait_until(
                    lambda: (
                        any("cannot renew" in line for line in logged) and watched.seen() > seen
                    ),
                    what="the reconnected listener's renewal to fail (and wake the followers)",
                )
                seen = watched.seen()
            finally:
                with runner.engine.begin() as connection:
                    connection.execute(text("ALTER TABLE follows_away RENAME TO follows"))
            wait_until(
                lambda: getattr(listener, "marks", 0) > renewed,
                timeout=scaled(30),
                what="a renewal soon after the failed one (not at the next refresh)",
            )
            wait_until(
                lambda: watched.seen() > seen,
                timeout=scaled(10),
                what="the renewal after the failed one to wake the follower",
            )
        finally:
            followers.close()


@pytest.mark.postgres
def test_a_listener_that_reconnects_wakes_every_follower(pg_url: str) -> None:
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="gap")
        followers = runner.store.followers
        watched = followers.follow("gap", 0.25)
        assert watched is not None
        listener = followers.watcher
        assert listener is not None
        seen = watched.seen()
        with runner.engine.begin() as connection:
            connection.execute(text("DELETE FROM follows"))  # its writes go unannounced...
        runner.approve("gap")
        assert not watched.wait(seen, QUIET)
        with runner.engine.begin() as connection:
            killed = connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN runner_follow%' AND pid <> pg_backend_pid() "
                    "AND datname = current_database()"
                )
            ).all()
        assert len(killed) == 1
        assert watched.wait(seen, HEARD)  # ...but the reconnected listener wakes it
        assert getattr(listener, "connections", 0) == 2
        with runner.engine.connect() as connection:  # and marked its run again
            assert connection.execute(select(follows.c.run_id)).scalars().all() == ["gap"]
        watched.close()


def _copy_entry(run_id: str, seq: int) -> Any:
    """A statement that locks the run's row (as the fenced write's CTE does) and writes a
    copy of its first entry at `seq`, in one statement."""
    return text(
        "WITH fenced AS (UPDATE runs SET updated_at = updated_at WHERE id = :run RETURNING id) "
        "INSERT INTO entries SELECT "
        + ", ".join(":seq" if c.name == "seq" else f"entries.{c.name}" for c in entries.columns)
        + " FROM entries, fenced WHERE entries.run_id = fenced.id AND entries.seq = 0"
    ).bindparams(run=run_id, seq=seq)


def _waiting_for_lock(engine: Engine) -> bool:
    with engine.connect() as connection:
        return bool(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
            ).scalar_one()
        )


@pytest.mark.postgres
def test_a_write_before_the_mark_commits_is_read_by_the_follower(pg_url: str) -> None:
    # The writer holds the run's row and has written (unannounced: not followed yet) but
    # not committed: the mark waits for its commit, so the read after the mark sees it.
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="race")
        last = len(list(runner.events("race"))) - 1
        writer = runner.engine.connect()
        transaction = writer.begin()
        writer.execute(_copy_entry("race", last + 1))
        marked = threading.Event()
        thread = threading.Thread(
            target=lambda: (mark(runner.engine, ["race"]), marked.set()), daemon=True
        )
        thread.start()
        wait_until(lambda: _waiting_for_lock(runner.engine), what="the mark to wait")
        assert not marked.is_set()
        transaction.commit()
        writer.close()
        assert marked.wait(HEARD)
        assert [e.position for e in runner.events("race", after=last)] == [last + 1]


@pytest.mark.postgres
def test_a_mark_of_two_runs_never_deadlocks_a_writer_that_locks_them_in_its_own_order(
    pg_url: str,
) -> None:
    # A child's write locks the child, then charges its parent: the mark of both (the
    # listener's renewal) must not hold the parent while it waits for the child.
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="p-parent")
        runner.run(shop, "refund", id="q-child")  # sorts after its "parent"
        writer = runner.engine.connect()
        transaction = writer.begin()
        writer.execute(text("UPDATE runs SET updated_at = updated_at WHERE id = 'q-child'"))
        failed: list[BaseException] = []

        def marking() -> None:
            try:
                mark(runner.engine, ["p-parent", "q-child"])
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=marking, daemon=True)
        thread.start()
        wait_until(lambda: _waiting_for_lock(runner.engine), what="the mark to wait")
        # The writer's second lock: granted, not a deadlock (nor a wait on the mark).
        writer.execute(text("UPDATE runs SET updated_at = updated_at WHERE id = 'p-parent'"))
        transaction.commit()
        writer.close()
        thread.join(HEARD)
        assert not thread.is_alive() and not failed, failed
        with runner.engine.connect() as connection:
            marked = connection.execute(select(follows.c.run_id).order_by("run_id")).scalars()
            assert marked.all() == ["p-parent", "q-child"]


@pytest.mark.postgres
def test_a_write_whose_statement_began_before_the_mark_committed_notifies(
    pg_url: str, heard: psycopg.Connection[Any]
) -> None:
    # The mark holds the run's row, uncommitted; the write's statement begins (its snapshot
    # cannot see the mark) and waits for the row. Once the mark commits, the write's
    # trigger, in a snapshot of its own, sees it: the write is announced.
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="late")
        last = len(list(runner.events("late"))) - 1
        marking = runner.engine.connect()
        transaction = marking.begin()
        marking.execute(text("SELECT id FROM runs WHERE id = 'late' FOR SHARE"))
        marking.execute(
            insert(follows).values(
                run_id="late", followed_until=text("now() + interval '1 minute'")
            )
        )
        done = threading.Event()

        def write() -> None:
            with runner.engine.begin() as connection:
                connection.execute(_copy_entry("late", last + 1))
            done.set()

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        wait_until(lambda: _waiting_for_lock(runner.engine), what="the write to wait")
        assert _payloads(heard, 0) == []
        transaction.commit()
        marking.close()
        assert done.wait(HEARD)
        assert _payloads(heard, HEARD) == ["late"]


@pytest.mark.postgres
def test_an_async_follower_cancelled_while_it_registers_is_forgotten(pg_url: str) -> None:
    # An SSE client gone while its stream registers: the registration, made in a thread
    # that the cancellation does not stop, must not outlive it (its run marked forever).
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="gone")
        followers = runner.store.followers
        holder = runner.engine.connect()
        transaction = holder.begin()
        holder.execute(text("SELECT id FROM runs WHERE id = 'gone' FOR UPDATE"))

        async def follow_then_leave() -> None:
            async def follow() -> None:
                async for _ in runner.events("gone", follow=True):
                    pass

            task = asyncio.create_task(follow())
            # Registered, and its mark waits for the row: cancel it there.
            await asyncio.to_thread(
                wait_until,
                lambda: followers.run_ids() == ["gone"] and _waiting_for_lock(runner.engine),
                what="the follower to wait for its mark",
            )
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            transaction.rollback()  # the mark goes through, in its thread
            holder.close()

        asyncio.run(follow_then_leave())  # waits for the registering thread to end
        assert followers.run_ids() == []


@pytest.mark.postgres
def test_a_finish_notifies_its_followers(pg_url: str, heard: psycopg.Connection[Any]) -> None:
    with Runner(pg_url) as runner:
        runner.run(shop, "refund", id="end")
        mark(runner.engine, ["end"])
        runner.cancel("end")  # a waiting run finishes at once: its status changes
        assert "end" in _payloads(heard, HEARD)
        assert runner.get("end").status is RunStatus.FINISHED


@pytest.mark.postgres
def test_a_run_that_cannot_be_marked_is_polled(pg_url: str) -> None:
    # A read-only session may not write `follows`: its follower polls on its own.
    engine = backend_for("postgresql").read_only_engine(make_url(pg_url))
    logged: list[str] = []
    followers = Followers(engine, log=logged.append)
    try:
        assert followers.follow("any", 0.25) is None
        assert not followers.run_ids()
        assert any("cannot mark run any followed, polling it" in line for line in logged)
    finally:
        followers.close()
        engine.dispose()


def test_an_async_follower_is_woken_by_the_watcher(db_url: str) -> None:
    with Runner(db_url) as worker, Runner(db_url) as follower:
        worker.run(shop, "refund", id="aio")
        waiting = len(list(worker.events("aio")))
        got: list[Event] = []
        registered: list[bool] = []

        async def follow() -> None:
            async for event in follower.events("aio", follow=True):
                got.append(event)
                if len(got) == waiting:  # idle now: only a write can wake it
                    # ...through the watcher, not a poll of its own (registered with it).
                    registered.append("aio" in follower.store.followers.run_ids())
                    threading.Thread(target=finish, daemon=True).start()

        def finish() -> None:
            worker.approve("aio")
            worker.resume("aio")

        asyncio.run(asyncio.wait_for(follow(), HEARD * 6))
        assert [e.position for e in got] == list(range(len(list(worker.events("aio")))))
        assert len(got) > waiting
        assert registered == [True]  # it waited on the watcher
