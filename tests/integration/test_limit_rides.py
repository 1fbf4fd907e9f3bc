"""A model call reserved alone, its reservation and settle riding in the run's journal
writes (runner.sql.limit_rides), on SQLite and PostgreSQL: a run's limited calls cost no
commit of their own, a call's end still wakes the runs waiting for its slot, and a worker
killed after such a reservation (its call sent, settled only in its memory) never lets a
minute pass the limit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from runner import Runner
from runner.core.clock import ManualClock
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.errors import LeaseLost, RunParked
from runner.sql import limits as sql_limits
from runner.sql.schema import limit_reservations
from tests.conftest import fresh_database

from .agents import SOLVER_REF, limited_solver_agent, solver_agent
from .counting import commits

LEASE = 30.0
PER_MINUTE = 5


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_database(request, request.param, tmp_path)


class Worker:
    """A run held by hand: its journal and its limits, as a worker's loop drives them."""

    def __init__(self, runner: Runner, run_id: str) -> None:
        claim = runner.store.claim_run(run_id, lease_seconds=LEASE, max_resumes=99, steal=True)
        self.journal = runner.store.open_journal(claim, lease_seconds=LEASE)
        self.limits = runner.store.run_limits(run_id, claim.epoch)

    def write(self, reservation: Any = None, *, used: int = 10, ahead: int | None = 10) -> None:
        """The step's write: `reservation`'s call settled in it at `used` tokens, and the
        next call's `ahead` reserved in it if it fits."""
        if reservation is not None:
            self.limits.settle_later(reservation, used)
        if ahead is not None:
            self.limits.reserve_ahead("m", ahead)
        self.journal.append(Entry(EntryKind.TASK, 0, Counters(), content="step"))


def test_a_run_whose_calls_are_reserved_alone_commits_as_often_as_one_with_no_limit(
    url: str,
) -> None:
    with Runner(url, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=100)  # (a concurrency: the next test)
        runner.run(limited_solver_agent, "1")  # the worker learns the limit gives no grant
        with commits(runner.engine) as limited:
            run_id = runner.run(limited_solver_agent, "2").run_id
        with commits(runner.engine) as unlimited:
            runner.run(solver_agent, "3")
        # A commit more: the first call's reservation, before any journal write could carry
        # it (the run's start holds its task). Every later call's rides in a write.
        assert limited == [unlimited[0] + 1]
        with runner.engine.connect() as connection:
            rows = connection.execute(
                select(limit_reservations).where(limit_reservations.c.run_id == run_id)
            ).all()
        assert [row.settled for row in rows] == [True, True]  # its two calls, settled


def test_a_call_s_end_in_a_journal_write_wakes_the_run_waiting_for_its_slot(url: str) -> None:
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", concurrency=1)
        holder, waiter = runner.submit(SOLVER_REF, "a"), runner.submit(SOLVER_REF, "b")
        held = Worker(runner, holder)
        call = held.limits.reserve("m", 10)
        with pytest.raises(RunParked):
            Worker(runner, waiter).limits.reserve("m", 10)
        held.write(call, ahead=None)  # the call settled in the step's write
        woken = runner.store.claim_some(
            limit=10, owner="tester:2:1", lease_seconds=LEASE, max_resumes=3
        )
        assert [claim.run.id for claim in woken] == [waiter]  # at once, not at its recheck


def test_a_call_reserved_in_a_write_leaves_room_for_the_runs_in_line(url: str) -> None:
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", tokens_per_minute=1_000)
        first, waiter = runner.submit(SOLVER_REF, "a"), runner.submit(SOLVER_REF, "b")
        worker = Worker(runner, first)
        call = worker.limits.reserve("m", 400)
        with pytest.raises(RunParked):  # 400 + 700 > 1,000: in line, 700 ahead of later calls
            Worker(runner, waiter).limits.reserve("m", 700)
        worker.write(call, used=400, ahead=200)  # 400 + 700 + 200 > 1,000: nothing reserved
        assert runner.limits()[0].requests == 1
        with pytest.raises(RunParked):  # alone, behind the run in line
            worker.limits.reserve("m", 200)


def test_a_journal_closing_writes_what_no_write_carried(url: str) -> None:
    """A run that stops after its step's write (cancelled, paused, out of time) gives back
    the reservation that write made for a call it never sends, and settles what is noted."""
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=PER_MINUTE)
        worker = Worker(runner, runner.submit(SOLVER_REF, "a"))
        first = worker.limits.reserve("m", 10)
        worker.write(first)  # the first call settled, the next one reserved
        assert (runner.limits()[0].requests, runner.limits()[0].in_flight) == (2, 1)
        with worker.journal:  # the run stops here, without its next call
            pass
        [info] = runner.limits()
        assert (info.requests, info.tokens, info.in_flight) == (1, 10, 0)
        other = Worker(runner, runner.submit(SOLVER_REF, "b"))
        other.limits.settle_later(other.limits.reserve("m", 10), 7)  # its output not written
        with other.journal:
            pass
        [info] = runner.limits()
        assert (info.requests, info.tokens, info.in_flight) == (2, 17, 0)


def test_a_worker_killed_after_a_call_reserved_in_its_write_never_passes_the_limit(
    url: str,
) -> None:
    """The provider's count in every sliding minute stays within the limit: the killed
    worker's calls (the second reserved in its step's write, sent, and settled only in its
    memory) and every call the fleet makes after it, over three minutes."""
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", requests_per_minute=PER_MINUTE)
        dead, survivor = runner.submit(SOLVER_REF, "dead"), runner.submit(SOLVER_REF, "next")
        killed = Worker(runner, dead)
        sent = []
        first = killed.limits.reserve("m", 10)  # alone: the worker learns it gives no grant
        sent.append(clock.time())
        with commits(runner.engine) as counted:
            killed.write(first)  # the first call settled, the second reserved: one commit
            second = killed.limits.reserve("m", 10)
            sent.append(clock.time())
            killed.limits.settle_later(second, 10)
        assert counted == [1]
        [info] = runner.limits()
        assert (info.requests, info.in_flight) == (2, 1)  # the second in flight
        del killed  # SIGKILLed: nothing more is written, its lease lapses
        end = clock.time() + 180
        worker = Worker(runner, survivor)
        reservation = None
        while clock.time() < end:
            try:
                worker.write(reservation)  # the last call's settle, the next reserved
                reservation = worker.limits.reserve("m", 10)
            except RunParked as parked:  # claimed again at its wake-up, as a worker would
                clock.advance(max(parked.until - clock.time(), 0.05))
                worker, reservation = Worker(runner, survivor), None
                continue
            sent.append(clock.time())  # sent and answered at once
            clock.advance(1)
    sent.sort()
    busiest = max(sum(1 for t in sent if end_ - 60 < t <= end_) for end_ in sent)
    assert busiest <= PER_MINUTE
    assert len(sent) >= 3 * PER_MINUTE - 1  # the fleet still used the limit


@pytest.fixture
def sweeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reservation sweeps its limit (the manual clock does not move the sweep's)."""
    monkeypatch.setattr(sql_limits, "SWEEP_SECONDS", 0.0)


@pytest.mark.parametrize("concurrency", [None, 1])
def test_a_call_in_flight_while_the_sweep_took_its_row_is_charged_by_its_write(
    url: str, sweeping: None, concurrency: int | None
) -> None:
    """A worker whose heartbeats failed for minutes while its call was in flight (its lease
    lapsed, the sweep took the call's row) renews its lease with the step's write: the call's
    settle in that write still charges its usage (PostgreSQL writes it in the fenced insert's
    statement when the limit has no concurrency)."""
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        # (100 requests a minute: no grant, whose reservation does not sweep)
        runner.set_limit(
            "m", tokens_per_minute=1_000, requests_per_minute=100, concurrency=concurrency
        )
        slow, other = runner.submit(SOLVER_REF, "slow"), runner.submit(SOLVER_REF, "other")
        worker = Worker(runner, slow)
        call = worker.limits.reserve("m", 100)
        clock.advance(200)
        Worker(runner, other).limits.reserve("m", 10)  # sweeps the slow call's row away
        worker.write(call, used=900, ahead=None)  # the fence holds: the lease was not taken
        [info] = runner.limits()
        assert (info.tokens, info.requests, info.in_flight) == (910, 2, 1)  # the other's call


def test_a_fenced_out_worker_s_late_settle_is_charged_when_its_journal_closes(
    url: str, sweeping: None
) -> None:
    """The step's write of a worker fenced out is refused; the settle it carried is written
    when the journal closes, though the sweep took the call's row: only the usage, no slot
    held, the run left to its new worker."""
    clock = ManualClock(time.time())
    with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
        runner.set_limit("m", tokens_per_minute=1_000, concurrency=1)
        slow, other = runner.submit(SOLVER_REF, "slow"), runner.submit(SOLVER_REF, "other")
        fenced = Worker(runner, slow)
        call = fenced.limits.reserve("m", 100)
        clock.advance(200)
        Worker(runner, other).limits.settle(Worker(runner, other).limits.reserve("m", 10), 10)
        Worker(runner, slow)  # another worker takes the run over
        before = runner.store.get_run(slow)
        with fenced.journal, pytest.raises(LeaseLost):
            fenced.write(call, used=900, ahead=None)
        [info] = runner.limits()
        assert (info.tokens, info.requests, info.in_flight) == (910, 2, 0)
        after = runner.store.get_run(slow)
        assert (after.status, after.lease_epoch, after.lease_expires_at) == (
            before.status,
            before.lease_epoch,
            before.lease_expires_at,
        )
