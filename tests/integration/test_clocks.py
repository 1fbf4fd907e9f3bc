"""Leases are measured on the database's clock: a worker whose own clock is wrong neither
steals live runs nor hands out leases that others read as expired."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from runner import Runner
from runner.core.clock import STEADY, SYSTEM, ManualClock, utc_now
from runner.sql import leases
from runner.sql import runs as store
from runner.sql.backend import DatabaseClock, backend_for
from runner.sql.database import open_engine

SKEW = 60.0  # seconds this "machine" is ahead of the database server


class Skewed:
    """The system clock, `SKEW` seconds fast."""

    def time(self) -> float:
        return SYSTEM.time() + SKEW

    def sleep(self, seconds: float) -> None:
        SYSTEM.sleep(seconds)


@pytest.fixture
def pg_url(postgres_database: str) -> str:
    """The session's PostgreSQL database, emptied of other tests' runs."""
    engine = open_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("TRUNCATE runs, entries CASCADE"))
    engine.dispose()
    return postgres_database


def queued(runner: Runner, run_id: str) -> None:
    assert store.create_run(
        runner.engine,
        run_id=run_id,
        agent=None,
        agent_name=None,
        release=None,
        task="t",
        budgets={},
        clock=runner.clock,
    )


@pytest.mark.postgres
def test_a_fast_worker_clock_reads_the_servers_time(pg_url: str) -> None:
    with Runner(pg_url) as runner:
        clock = backend_for("postgresql").clock(runner.engine, base=Skewed())
        assert isinstance(clock, DatabaseClock)
        assert clock.offset is not None and abs(clock.offset + SKEW) < 5
        assert abs(clock.time() - SYSTEM.time()) < 5


@pytest.mark.postgres
def test_a_fast_worker_does_not_steal_live_runs(pg_url: str) -> None:
    with Runner(pg_url) as honest:
        for n in range(4):
            queued(honest, f"live-{n}")
            leases.claim_run(
                honest.engine, f"live-{n}", owner="honest:1:1", lease_seconds=30, max_resumes=3
            )
        fast = backend_for("postgresql").clock(honest.engine, base=Skewed())
        claims = leases.claim_some(
            honest.engine, limit=1, owner="fast:1:1", lease_seconds=30, max_resumes=3, clock=fast
        )
        assert claims == []
        # The same worker on its own wrong clock would have taken one: the test can fail.
        wrong = leases.claim_some(
            honest.engine,
            limit=1,
            owner="fast:1:1",
            lease_seconds=30,
            max_resumes=3,
            clock=Skewed(),
        )
        assert len(wrong) == 1


def test_sqlite_leases_are_on_this_machines_clock(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/clock.db"
    with Runner(url) as runner:
        assert runner.clock is STEADY  # the system clock, steadied against its steps
        assert abs(runner.clock.time() - SYSTEM.time()) < 1


def test_a_runner_takes_the_clock_it_is_given(db_url: str) -> None:
    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        queued(runner, "manual")
        row = runner.row("manual")
    assert row.created_at == utc_now(clock)
    assert row.created_at.tzinfo is UTC
    assert row.created_at != datetime.now(UTC)


class Stepped:
    """The system clock, stepped forward by `step` seconds when the test says (NTP, a VM
    resumed): the wall clock jumps, the monotonic clock does not."""

    def __init__(self) -> None:
        self.step = 0.0

    def time(self) -> float:
        return SYSTEM.time() + self.step

    def sleep(self, seconds: float) -> None:
        SYSTEM.sleep(seconds)


@pytest.mark.postgres
def test_a_worker_whose_clock_steps_forward_does_not_steal_live_runs(pg_url: str) -> None:
    with Runner(pg_url) as honest:
        for n in range(3):
            queued(honest, f"held-{n}")
            leases.claim_run(
                honest.engine, f"held-{n}", owner="honest:1:1", lease_seconds=30, max_resumes=3
            )
        wall = Stepped()
        stepping = backend_for("postgresql").clock(honest.engine, base=wall)  # measured now
        wall.step = 35.0  # within the minute before the clock would be measured again
        claims = leases.claim_some(
            honest.engine,
            limit=1,
            owner="stepped:1:1",
            lease_seconds=30,
            max_resumes=3,
            clock=stepping,
        )
        assert claims == []
        assert abs(stepping.time() - SYSTEM.time()) < 5  # still the server's time
        # On its stepped wall clock alone it would have taken them: the test can fail.
        wrong = leases.claim_some(
            honest.engine,
            limit=1,
            owner="stepped:1:1",
            lease_seconds=30,
            max_resumes=3,
            clock=wall,
        )
        assert len(wrong) == 1


def test_a_clock_step_on_either_database_steals_no_live_run(db_url: str) -> None:
    """The holder claimed on this machine's clock; then the wall clock steps 35 s forward
    (less than a lease's 30 s after the claim plus the step): the runs are still held."""
    with Runner(db_url) as honest:
        wall = Stepped()
        clock = backend_for(honest.engine.dialect.name).clock(honest.engine, base=wall)
        for n in range(3):
            queued(honest, f"kept-{n}")
            leases.claim_run(
                honest.engine,
                f"kept-{n}",
                owner="honest:1:1",
                lease_seconds=30,
                max_resumes=3,
                clock=clock,
            )
        wall.step = 35.0
        stolen = leases.claim_some(
            honest.engine, limit=1, owner="other:1:1", lease_seconds=30, max_resumes=3, clock=clock
        )
        assert stolen == []
        wrong = leases.claim_some(
            honest.engine, limit=1, owner="other:1:1", lease_seconds=30, max_resumes=3, clock=wall
        )
        assert len(wrong) == 1  # on the stepped wall clock alone: the test can fail
