"""Runs in flight are not connections: a worker's runs hold a connection only while they
write, one heartbeat statement renews every lease it holds, and its pool is sized from its
concurrency and what the database can spare."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text

from runner import Agent, AgentResult, Runner
from runner.core.agent import load_agent
from runner.core.clock import ManualClock, utc_now
from runner.core.counters import Counters
from runner.errors import LeaseLost
from runner.service.worker import Worker
from runner.sql import backend, leases, pool_size, writer
from runner.sql import runs as store
from runner.sql.database import ensure_schema, open_engine
from runner.sql.heartbeat import Heartbeat
from runner.sql.journal import SqlJournal
from tests.conditions import wait_until

from .agents import RENDEZVOUS_REF
from .support import entry_rows, task_entry, tool_action, wander


class Connections:
    """What an engine's pool did: connections opened, and the most checked out at once."""

    def __init__(self, engine: Engine) -> None:
        self.opened = 0
        self.taken = 0  # checkouts, all told
        self.out = 0
        self.peak = 0
        self._lock = threading.Lock()
        event.listen(engine, "connect", self._connect)
        event.listen(engine, "checkout", self._checkout)
        event.listen(engine, "checkin", self._checkin)

    def _connect(self, *_: Any) -> None:
        with self._lock:
            self.opened += 1

    def _checkout(self, *_: Any) -> None:
        with self._lock:
            self.taken += 1
            self.out += 1
            self.peak = max(self.peak, self.out)

    def _checkin(self, *_: Any) -> None:
        with self._lock:
            self.out -= 1


@pytest.fixture
def rendezvous() -> Iterator[Any]:
    # The very object the worker's runs call: the loader caches the agent file's module.
    model = load_agent(RENDEZVOUS_REF).model
    yield model
    model.reset(0)


def test_a_worker_keeps_more_runs_in_flight_than_it_holds_connections(
    db_url: str, rendezvous: Any
) -> None:
    runs, pool = 40, 3
    rendezvous.reset(runs)  # no run gets past its first model call until all 40 are in one
    worker = Worker(db_url, concurrency=runs, poll=0.05, once=True, connections=pool)
    assert worker.pool.size == pool
    connections = Connections(worker.runner.engine)
    ids = [
        worker.runner.submit(RENDEZVOUS_REF, "count", id=f"r{i:02d}", wake=False)
        for i in range(runs)
    ]
    worker.serve()

    assert rendezvous.peak == runs  # all forty in their model call at one moment
    assert connections.opened <= pool and connections.peak <= pool
    engine = open_engine(db_url)
    try:
        for run_id in ids:
            row = store.get_run(engine, run_id)
            assert (str(row.stop_reason), row.output, row.steps) == ("final", "2", 3), row
            kinds = [r["kind"] for r in entry_rows(engine, run_id)]
            assert kinds == ["task", *["action", "observation"] * 2, "final"], kinds
            assert {r["lease_epoch"] for r in entry_rows(engine, run_id)} == {1}
    finally:
        engine.dispose()
    assert worker.finished == runs


def test_one_statement_renews_every_lease_and_finds_the_one_taken(db_url: str) -> None:
    clock = ManualClock()
    engine = open_engine(db_url)
    try:
        for i in range(25):
            store.create_run(
                engine, run_id=f"h{i:02d}", agent=None, agent_name=None, release=None,
                task="t", budgets={}, clock=clock,
            )  # fmt: skip
        claims = [
            leases.claim_run(
                engine, f"h{i:02d}", owner="w:1:1", lease_seconds=30, max_resumes=3, clock=clock
            )
            for i in range(25)
        ]
        heartbeat = Heartbeat(engine, lease_seconds=30, interval=3600, clock=clock)
        journals = [SqlJournal(engine, c, lease_seconds=30, clock=clock) for c in claims]
        for journal in journals:
            heartbeat.hold(journal)
        thief = leases.claim_run(
            engine, "h07", owner="t:1:1", lease_seconds=30, max_resumes=3, steal=True, clock=clock
        )
        statements: list[str] = []

        def seen(_c: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements.append(statement)

        clock.advance(20)
        event.listen(engine, "before_cursor_execute", seen)
        heartbeat.beat()
        event.remove(engine, "before_cursor_execute", seen)
        heartbeat.close()

        assert len([s for s in statements if s.lstrip().upper().startswith("UPDATE")]) == 1
        lost = [j.run_id for j in journals if j.lost.is_set()]
        assert lost == ["h07"]
        renewed_until = utc_now(clock) + timedelta(seconds=30)
        for i in range(25):
            row = store.get_run(engine, f"h{i:02d}")
            if i == 7:  # the thief's lease, as it took it
                assert (row.lease_owner, row.lease_epoch) == ("t:1:1", thief.epoch)
                assert row.lease_expires_at < renewed_until
            else:
                assert row.lease_expires_at == renewed_until, row
        with pytest.raises(LeaseLost):
            journals[7].append(task_entry("t"))
        journals[8].append(task_entry("t"))  # the others write on
        journals[8].append(tool_action("h08", 1, "add", {"a": 1}, Counters(steps=1)))
        assert [r["kind"] for r in entry_rows(engine, "h08")] == ["task", "action"]
        assert entry_rows(engine, "h07") == []
    finally:
        engine.dispose()


def test_a_runner_beats_on_one_thread_for_all_its_runs(db_url: str) -> None:
    """Runs executed side by side share the runner's one heartbeat thread."""
    threads: list[set[str]] = []
    inside = threading.Barrier(4, timeout=30)

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        inside.wait()  # four runs in flight at once, each a lease held
        threads.append({t.name for t in threading.enumerate() if "heartbeat" in t.name})
        inside.wait()
        return {"type": "final", "content": "ok"}

    agent = Agent(model, {}, name="beats")
    results: list[AgentResult] = []
    with Runner(db_url, lease_seconds=0.9) as runner:
        runs = [
            threading.Thread(target=lambda i=i: results.append(runner.run(agent, f"t{i}")))
            for i in range(4)
        ]
        for thread in runs:
            thread.start()
        for thread in runs:
            thread.join(60)
    assert [str(r.stop_reason) for r in results] == ["final"] * 4
    assert threads == [{"runner-heartbeat"}] * 4  # each run saw the one thread


def test_the_pool_is_sized_from_the_concurrency_and_the_database(db_url: str) -> None:
    small = pool_size.choose_pool(db_url, 1)
    assert small.size == 1 + pool_size.POOL_FLOOR  # never more than one run can use
    large = pool_size.choose_pool(db_url, 1000)
    if db_url.startswith("sqlite"):
        assert large.size == pool_size.SQLITE_POOL_CAP
    else:
        assert pool_size.POOL_FLOOR <= large.size <= pool_size.POSTGRES_POOL_CAP
        assert "max_connections" in large.reason and "in use" in large.reason
    capped = pool_size.choose_pool(db_url, 1000, cap=3)
    assert capped.size == 3
    assert capped.describe(1000).startswith("pool 3 connections for concurrency 1000 (capped")


def test_sqlite_writes_of_a_process_take_one_lock_per_file(tmp_path: Path) -> None:
    first = open_engine(f"sqlite:///{tmp_path / 'a.db'}")
    same_file = open_engine(f"sqlite:///{tmp_path}/./a.db")
    other_file = open_engine(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        with writer.writing(first):
            # Another engine on the same file must wait its turn; another file need not.
            turn = writer._lock_of(same_file)
            assert turn is not None and not turn.acquire(blocking=False)
            with writer.writing(other_file):
                pass
        assert turn.acquire(blocking=False)
        turn.release()
    finally:
        for engine in (first, same_file, other_file):
            engine.dispose()


def _open_handles(path: Path) -> int:
    """How many of this process's file descriptors have the database file open."""
    target = os.path.realpath(path)
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == target)


def test_sqlite_writes_of_a_process_share_one_kept_connection(tmp_path: Path) -> None:
    database = tmp_path / "kept.db"
    runner = Runner(f"sqlite:///{database}")
    try:
        pool = Connections(runner.engine)
        agent = Agent(wander(), {"search": lambda q: f"found {q}"}, name="wanderer")
        result = runner.run(agent, "look around", max_steps=30)
        assert result.steps == 30  # 30 tool calls: 61 journal writes
        # Checking a connection out per write took at least 61; the writes now share one,
        # and only the run's few reads check out connections of their own.
        assert pool.taken < 10, pool.taken
        assert runner.writer.keeps
        assert runner.engine.pool.checkedout() == 1  # the kept writer, ready for the next
        assert _open_handles(database) >= 1
    finally:
        runner.close()
    assert _open_handles(database) == 0  # close gave the kept writer back, dispose shut it


def test_a_runner_dropped_unclosed_leaves_no_connection_open(tmp_path: Path) -> None:
    database = tmp_path / "dropped.db"

    def run_and_drop() -> None:
        runner = Runner(f"sqlite:///{database}")
        agent = Agent(wander(), {"search": lambda q: f"found {q}"}, name="wanderer")
        assert runner.run(agent, "look around", max_steps=3).steps == 3
        assert runner.writer.keeps and _open_handles(database) >= 1

    run_and_drop()

    # The kept writer belongs to the runner: nothing else holds it, or the engine, alive,
    # once the runner's threads are done with it (the heartbeat's ends a second after its
    # last lease goes). Collected until then: the cycles give the kept connection back to a
    # pool that is itself garbage, which the next collection frees, closing the connection;
    # and gc.collect() returns at once, collecting nothing, while another thread of this
    # process is in a collection of its own.
    def closed() -> bool:
        gc.collect()
        return _open_handles(database) == 0

    def still_open() -> str:
        names = sorted(thread.name for thread in threading.enumerate())
        return f"the dropped runner's connection closed (threads alive: {names})"

    wait_until(closed, timeout=10.0, what=still_open)


def test_a_failed_write_leaves_the_kept_connection_holding_no_lock(tmp_path: Path) -> None:
    database = tmp_path / "fenced.db"
    clock = ManualClock()
    engine = open_engine(f"sqlite:///{database}")
    try:
        ensure_schema(engine)
        store.create_run(
            engine, run_id="f1", agent=None, agent_name=None, release=None, task="t",
            budgets={}, clock=clock,
        )  # fmt: skip
        claim = leases.claim_run(
            engine, "f1", owner="w:1:1", lease_seconds=30, max_resumes=3, clock=clock
        )
        kept = writer.Writer(engine)
        with SqlJournal(engine, claim, lease_seconds=30, clock=clock, writer=kept) as journal:
            journal.append(task_entry("t"))
            leases.claim_run(
                engine, "f1", owner="t:1:1", lease_seconds=30, max_resumes=3, steal=True,
                clock=clock,
            )  # fmt: skip
            with pytest.raises(LeaseLost):  # fenced out inside the write's transaction
                journal.append(tool_action("f1", 1, "add", {"a": 1}, Counters(steps=1)))
        assert kept.keeps
        # The kept connection rolled back: another process's writer gets the lock at once.
        other = sqlite3.connect(database, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        finally:
            other.close()
        kept.close()
    finally:
        engine.dispose()


def test_a_pool_too_small_to_spare_a_writer_keeps_none(tmp_path: Path) -> None:
    with Runner(f"sqlite:///{tmp_path / 'one.db'}", connections=1) as runner:
        agent = Agent(wander(), {"search": lambda q: f"found {q}"}, name="wanderer")
        # Its reads need the one connection between writes: kept by a writer, they would
        # wait for it until the pool's timeout.
        assert runner.run(agent, "look around", max_steps=5).steps == 5
        assert not runner.writer.keeps
        assert runner.engine.pool.checkedout() == 0


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_connection_is_pinged_only_after_sitting_idle(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_engine(db_url)
    pings: list[int] = []
    ping = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda c: pings.append(1) or ping(c))
    try:
        for _ in range(5):  # back to back, as a run's writes are: no round trip of a ping
            with engine.connect() as connection:
                pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        assert pings == []
        # Idle past the limit, and closed by the server meanwhile: pinged, found dead,
        # replaced by a new connection before the statement runs.
        monkeypatch.setattr(backend, "PING_AFTER_IDLE_SECONDS", 0.0)
        admin = create_engine(db_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f"SELECT pg_terminate_backend({pid})"))
        admin.dispose()
        with engine.connect() as connection:
            again = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        assert pings and again != pid
    finally:
        engine.dispose()
