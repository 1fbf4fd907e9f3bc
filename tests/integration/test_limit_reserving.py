"""A run's next call reserved, and a call under a concurrency settled, in its journal write's
one statement on PostgreSQL (runner.sql.reserving): that statement reads the minute and the
line as of its start, before it waits for the limit's row, so a reservation or a park
committed while it waited must not go unseen. Each test holds such a transaction open, lets
the write wait for it, commits it, and checks what the write did."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from runner import Runner
from runner.core.clock import SYSTEM
from runner.errors import RunParked
from runner.sql import limits as sql_limits
from runner.sql.database import open_engine
from runner.sql.reservations import _reserve
from tests.conditions import wait_until
from tests.conftest import fresh_database

from .agents import SOLVER_REF
from .counting import statements
from .test_limit_rides import LEASE, Worker

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_database(request, "postgres", tmp_path)


def _waiting_for_a_lock(connection: Connection) -> bool:
    """Whether a statement on this database waits for a lock (the limit's row) now."""
    found = connection.execute(
        text(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
    ).scalar_one()
    connection.commit()  # the next look takes a new snapshot of the server's activity
    return bool(found)


def _while_held(
    runner: Runner, hold: Callable[[Connection], Any], write: Callable[[], None]
) -> Any:
    """`hold` in a transaction left open until `write`, on a thread, waits for its lock;
    then the transaction commits and the write goes on. What `hold` returned."""
    # Connections of their own: the runner's pool is the write's.
    engine = open_engine(str(runner.engine.url.render_as_string(hide_password=False)))
    try:
        with engine.connect() as holder, engine.connect() as watcher:
            transaction = holder.begin()
            held = hold(holder)
            thread = threading.Thread(target=write)
            thread.start()
            try:
                wait_until(
                    lambda: _waiting_for_a_lock(watcher), what="the write waiting for the lock"
                )
            finally:
                transaction.commit()
                thread.join()
    finally:
        engine.dispose()
    return held


def test_a_reservation_in_a_write_yields_to_one_committed_while_it_waited(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_limits, "SWEEP_SECONDS", 3600.0)  # the write's one statement
    with Runner(url, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=2)
        first, second = runner.submit(SOLVER_REF, "a"), runner.submit(SOLVER_REF, "b")
        worker = Worker(runner, first)
        worker.limits.reserve("m", 10)  # alone: 1 of 2, and the worker reserves "m" alone
        claim = runner.store.claim_run(second, lease_seconds=LEASE, max_resumes=9, steal=True)

        def reserve_the_last(connection: Connection) -> Any:
            return _reserve(connection, second, claim.epoch, "m", 10, SYSTEM)

        # The write wants its run's next call reserved; the minute it read held 1 of 2.
        taken = _while_held(runner, reserve_the_last, lambda: worker.write(ahead=10))
        assert taken.id is not None  # the other run's reservation: 2 of 2
        [info] = runner.limits()
        assert info.requests == 2  # the write reserved nothing: 3 would pass the limit
        with pytest.raises(RunParked):  # its call reserves alone, and waits
            worker.limits.reserve("m", 10)


def test_a_reservation_and_a_settle_in_a_write_are_its_one_statement(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_limits, "SWEEP_SECONDS", 3600.0)  # no sweep in these writes
    with Runner(url, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=3, concurrency=5)
        worker = Worker(runner, runner.submit(SOLVER_REF, "a"))
        call = worker.limits.reserve("m", 10)
        with statements(runner.engine) as settling:
            worker.write(call, used=7, ahead=None)  # the call settled in its write
        with statements(runner.engine) as reserving:
            worker.write(ahead=10)  # the next one reserved in the next
        assert (settling, reserving) == ([1], [1])
        [info] = runner.limits()
        assert (info.requests, info.tokens, info.in_flight) == (2, 17, 1)
        with statements(runner.engine) as taking:
            worker.limits.reserve("m", 10)
        assert taking == [0]  # the call took the write's reservation
        assert runner.limits()[0].requests == 2


def test_a_settle_in_a_write_wakes_a_run_that_parked_while_it_waited(url: str) -> None:
    with Runner(url, lease_seconds=LEASE) as runner:
        runner.set_limit("m", concurrency=1)
        holder, waiter = runner.submit(SOLVER_REF, "a"), runner.submit(SOLVER_REF, "b")
        held = Worker(runner, holder)
        call = held.limits.reserve("m", 10)  # the one slot
        claim = runner.store.claim_run(waiter, lease_seconds=LEASE, max_resumes=9, steal=True)

        def park(connection: Connection) -> Any:
            # No slot: the waiter takes its place in line and parks (not committed yet).
            return _reserve(connection, waiter, claim.epoch, "m", 10, SYSTEM)

        # The settle's statement read the line before the park committed: empty.
        _while_held(runner, park, lambda: held.write(call, ahead=None))
        woken = runner.store.claim_some(
            limit=10, owner="tester:2:1", lease_seconds=LEASE, max_resumes=3
        )
        assert [claim.run.id for claim in woken] == [waiter]  # at once, not at its recheck
