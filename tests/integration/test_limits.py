"""Provider limits on both databases: set, listed and removed through the `Runner`;
reserved from and settled by two workers at once; a crash's reservation expiring with its
lease; a provider's Retry-After shared; the line kept first come, first served.

The rule of a reservation (what fits, the wake-up time) is shared with the in-memory store
(runner.testing.memory_limits) and tested there on a manual clock (tests/unit/test_limits.py).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from runner import Runner
from runner.core.clock import ManualClock
from runner.core.limits import UNSETTLED_GRACE_SECONDS, Reservation
from runner.core.status import RunStatus
from runner.errors import LimitNotFound, RunParked
from runner.service.worker import Worker
from runner.sql import leases
from runner.sql.schema import limit_reservations, runs
from runner.sql.store import SqlStore
from runner.store.rules import Claim
from tests.conditions import wait_until

AGENTS = Path(__file__).resolve().with_name("agents.py")
AGENT = f"{AGENTS}:solver_agent"
LIMITED = f"{AGENTS}:limited_solver_agent"


def claimed(runner: Runner, run_id: str, owner: str = "tester:1:1", lease: float = 30) -> Claim:
    return leases.claim_run(
        runner.engine, run_id, owner=owner, lease_seconds=lease, max_resumes=3, clock=runner.clock
    )


def test_set_list_and_remove_a_limit(db_url: str) -> None:
    with Runner(db_url) as runner:
        assert runner.limits() == []
        runner.set_limit("openai/gpt-4.1", tokens_per_minute=60_000, requests_per_minute=300)
        runner.set_limit("local", concurrency=2)
        runner.set_limit("openai/gpt-4.1", tokens_per_minute=90_000, requests_per_minute=300)
        found = {info.name: info for info in runner.limits()}
        assert list(found) == ["local", "openai/gpt-4.1"]
        gpt = found["openai/gpt-4.1"]
        assert (gpt.tokens_per_minute, gpt.requests_per_minute, gpt.concurrency) == (
            90_000,
            300,
            None,
        )
        assert (gpt.tokens, gpt.tokens_left, gpt.requests_left, gpt.waiting) == (0, 90_000, 300, 0)
        assert found["local"].tokens_left is None and found["local"].concurrency == 2
        runner.remove_limit("local")
        assert [info.name for info in runner.limits()] == ["openai/gpt-4.1"]
        with pytest.raises(LimitNotFound):
            runner.remove_limit("local")
        with pytest.raises(ValueError):
            runner.set_limit("no spaces", tokens_per_minute=1)
        with pytest.raises(ValueError):
            runner.set_limit("x", tokens_per_minute=0)


def test_reserve_then_settle_charges_the_reported_usage(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_limit("m", tokens_per_minute=1_000, requests_per_minute=10)
        run_id = runner.submit(AGENT, "t")
        claim = claimed(runner, run_id)
        limits = runner.store.run_limits(run_id, claim.epoch)
        held = limits.reserve("m", 700)
        [info] = runner.limits()
        assert (info.tokens, info.requests, info.in_flight) == (700, 1, 1)
        limits.settle(held, 120)
        [info] = runner.limits()
        assert (info.tokens, info.requests, info.in_flight, info.tokens_left) == (120, 1, 0, 880)
        # A limit not set reserves nothing.
        assert limits.reserve("unset", 5) == Reservation("unset", None, 5)


def test_two_workers_racing_for_the_last_tokens(db_url: str) -> None:
    """Room for one call of 600 of the 1,000 tokens: of two runs reserving at once (each
    on its own Runner, as two workers), exactly one gets it and the other is parked."""
    with Runner(db_url) as setup:
        setup.set_limit("m", tokens_per_minute=1_000)
        first, second = setup.submit(AGENT, "a"), setup.submit(AGENT, "b")
    outcomes: list[object] = []
    start = threading.Barrier(2)

    def reserve(run_id: str, owner: str) -> None:
        with Runner(db_url) as mine:
            claim = claimed(mine, run_id, owner)
            limits = mine.store.run_limits(run_id, claim.epoch)
            start.wait(30)
            try:
                outcomes.append(limits.reserve("m", 600))
            except RunParked as parked:
                outcomes.append(parked)

    threads = [
        threading.Thread(target=reserve, args=(run_id, f"worker:{n}:1"))
        for n, run_id in enumerate((first, second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    got = [o for o in outcomes if isinstance(o, Reservation)]
    parked = [o for o in outcomes if isinstance(o, RunParked)]
    assert len(got) == 1 and len(parked) == 1
    with Runner(db_url) as runner:
        loser = runner.row(parked[0].run_id)
        # Parked: queued again, no lease, not claimable before the 600 tokens age out.
        assert loser.status is RunStatus.QUEUED and loser.lease_owner is None
        assert loser.not_before is not None
        assert loser.not_before >= runner.now() + timedelta(seconds=55)
        [info] = runner.limits()
        assert (info.tokens, info.waiting) == (600, 1)


def test_a_crashed_reservation_counts_for_its_minute_but_holds_no_slot(db_url: str) -> None:
    """A worker that dies between reserve and settle may have sent the call: the provider
    charged it to its minute, and the run's next worker sends it again. The reservation keeps
    counting at its estimate for the rest of its minute, lease or no lease; only its place
    in the concurrency ends with the lease."""
    with Runner(db_url) as runner:
        runner.set_limit("m", tokens_per_minute=1_000, concurrency=1)
        run_id = runner.submit(AGENT, "t")
        claim = claimed(runner, run_id)
        runner.store.run_limits(run_id, claim.epoch).reserve("m", 900)
        [info] = runner.limits()
        assert (info.tokens, info.in_flight) == (900, 1)
        # The worker dies holding it (never settles); its lease runs out.
        with runner.engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(lease_expires_at=runner.now() - timedelta(seconds=1))
            )
        [info] = runner.limits()
        assert (info.tokens, info.requests, info.in_flight) == (900, 1, 0)
        # A call that fits beside it is not held back by the dead call's slot...
        small = runner.submit(AGENT, "u")
        held = claimed(runner, small)
        mine = runner.store.run_limits(small, held.epoch)
        mine.settle(mine.reserve("m", 50), 50)
        # ...but one that does not (the same call, taken over) is parked until the dead
        # call's minute ends, not let through to the provider's 429.
        other = runner.submit(AGENT, "v")
        taken = claimed(runner, other)
        with pytest.raises(RunParked) as parked:
            runner.store.run_limits(other, taken.epoch).reserve("m", 900)
        assert parked.value.until >= (runner.now() + timedelta(seconds=55)).timestamp()


def test_a_retry_after_holds_back_every_run_of_the_limit(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_limit("m", requests_per_minute=100)
        told, other = runner.submit(AGENT, "told"), runner.submit(AGENT, "other")
        claim = claimed(runner, told)
        runner.store.run_limits(told, claim.epoch).back_off("m", 20)
        [info] = runner.limits()
        assert info.backoff_until is not None
        assert info.backoff_until >= runner.now() + timedelta(seconds=15)
        taken = claimed(runner, other, "worker:2:1")
        with pytest.raises(RunParked) as parked:
            runner.store.run_limits(other, taken.epoch).reserve("m", 10)
        assert parked.value.until >= (runner.now() + timedelta(seconds=15)).timestamp()


def test_the_line_is_first_come_first_served(db_url: str) -> None:
    """A run that began to wait first gets the room first: one that comes later leaves room
    for the estimates ahead of it, whatever its priority."""
    with Runner(db_url) as runner:
        runner.set_limit("m", tokens_per_minute=1_000)
        filler, early, late = (runner.submit(AGENT, t) for t in ("filler", "early", "late"))
        claim = claimed(runner, filler)
        runner.store.run_limits(filler, claim.epoch).reserve("m", 1_000)
        for run_id in (early, late):
            taken = claimed(runner, run_id)
            with pytest.raises(RunParked):
                runner.store.run_limits(run_id, taken.epoch).reserve("m", 600)
        # The minute passes: the filler's charge ages out (moved back, as the clock would; a
        # call not settled counts for a grace longer).
        with runner.engine.begin() as connection:
            back = timedelta(seconds=62 + UNSETTLED_GRACE_SECONDS)
            moved = {"reserved_at": runner.now() - back, "counted_from": runner.now() - back}
            moved["counted_from"] += timedelta(seconds=UNSETTLED_GRACE_SECONDS)
            connection.execute(update(limit_reservations).values(**moved))
        # The later one comes back first, but 600 + the early one's 600 do not fit.
        taken = claimed(runner, late)
        with pytest.raises(RunParked):
            runner.store.run_limits(late, taken.epoch).reserve("m", 600)
        taken = claimed(runner, early)
        got = runner.store.run_limits(early, taken.epoch).reserve("m", 600)
        assert got.id is not None and got.waited > 0
        with runner.engine.connect() as connection:
            holders = set(connection.execute(select(limit_reservations.c.run_id)).scalars())
        assert early in holders and late not in holders


def test_a_run_waiting_for_a_slot_is_woken_by_a_call_s_end_not_by_the_clock(
    db_url: str,
) -> None:
    """Concurrency 1, one slow call in flight and four runs in line: while the call lasts
    nothing claims them again (no new epoch, no park after park); its end wakes the first
    in line alone, whose end wakes the next. Each waiting run is claimed twice in all: once
    to park, once to make its call."""
    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        runner.set_limit("m", concurrency=1)
        slow, *line = (runner.submit(AGENT, f"t{n}") for n in range(5))
        claim = claimed(runner, slow, lease=300)  # its lease outlasts the test's clock
        held = runner.store.run_limits(slow, claim.epoch).reserve("m", 10)
        for run_id in line:
            taken = claimed(runner, run_id)
            with pytest.raises(RunParked):
                runner.store.run_limits(run_id, taken.epoch).reserve("m", 10)
            clock.advance(0.01)  # each begins to wait after the one before it

        def claim_all() -> list[Claim]:
            return runner.store.claim_some(
                limit=10, owner="tester:2:1", lease_seconds=30, max_resumes=3
            )

        for _ in range(20):  # the slow call goes on for 20 s: nobody is woken meanwhile
            clock.advance(1)
            assert claim_all() == []
        runner.store.run_limits(slow, claim.epoch).settle(held, 10)
        for run_id in line:
            [woken] = claim_all()
            assert woken.run.id == run_id
            assert claim_all() == []  # the one slot is this run's: the others sleep on
            mine = runner.store.run_limits(run_id, woken.epoch)
            call = mine.reserve("m", 10)
            clock.advance(3)
            mine.settle(call, 10)
        assert claim_all() == []
        assert [runner.row(run_id).lease_epoch for run_id in line] == [2, 2, 2, 2]
        [info] = runner.limits()
        assert (info.in_flight, info.waiting) == (0, 0)


def test_a_drain_waits_for_the_runs_a_limit_parked_and_leaves_those_not_started(
    db_url: str,
) -> None:
    """`runner worker --once` under one request a minute: the runs it starts (two model
    calls each) all finish, each parked and claimed again as the minute frees room; a run
    delayed by an hour, not started, is left as it was."""
    clock = ManualClock()
    store = SqlStore(db_url, clock=clock)
    runner = Runner(store=store)
    try:
        runner.set_limit("m", requests_per_minute=1)
        started = [runner.submit(LIMITED, f"t{n}") for n in range(3)]
        later = runner.submit(LIMITED, "later", delay=3600)
        assert store.first_parked(None, runner.now() + timedelta(days=1)) is None
        worker = Worker(store=store, once=True, concurrency=4, poll=0.01)
        serving = threading.Thread(target=worker.serve)
        serving.start()

        def over() -> bool:
            serving.join(0.01)
            if not serving.is_alive():
                return True
            if runner.list(status=RunStatus.RUNNING):
                return False
            # Nothing running: the minute passes at once, to the first wake-up.
            wake = store.first_parked(None, runner.now() + timedelta(seconds=120))
            if wake is not None and wake > runner.now():
                clock.advance((wake - runner.now()).total_seconds())
            return False

        try:
            wait_until(over, what="the drain's end")
        finally:
            worker.stopping.set()
            serving.join()
        assert [runner.get(run_id).stop_reason for run_id in started] == ["final"] * 3
        assert runner.row(later).status is RunStatus.QUEUED
        assert runner.row(later).lease_epoch == 0
        assert store.first_parked(None, runner.now() + timedelta(days=1)) is None
        assert runner.limits()[0].waiting == 0
    finally:
        runner.close()
        store.close()
