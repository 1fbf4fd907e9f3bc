"""The rules of a provider limit, each where it could break, on all three stores (in memory,
SQLite, PostgreSQL): the in-memory store keeps its own copy of the line, the charges and the
back-off, and the SQL store its queries, so a rule is asserted of each.

A manual clock moves the minute on (the runs' leases lapse with it, so a test settles the
calls it wants charged). A rule asserted here failed with the bug planted that breaks it
(see /work/notes/p40d.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import Runner
from runner.core.clock import ManualClock
from runner.core.limits import Reservation
from runner.errors import RunParked
from runner.testing import InMemoryStore
from tests.conftest import fresh_database

from .agents import SOLVER_REF

LEASE = 30.0


class Limited:
    """A runner on one store with a manual clock, and a run's reservations from a limit."""

    def __init__(self, runner: Runner, clock: ManualClock) -> None:
        self.runner, self.clock = runner, clock

    def limits(self, run_id: str) -> Any:
        claim = self.runner.store.claim_run(run_id, lease_seconds=LEASE, max_resumes=5, steal=True)
        return self.runner.store.run_limits(run_id, claim.epoch)

    def reserve(self, run_id: str, tokens: int, limit: str = "m") -> Reservation:
        return self.limits(run_id).reserve(limit, tokens)

    def parks(self, run_id: str, tokens: int, limit: str = "m") -> RunParked:
        with pytest.raises(RunParked) as parked:
            self.reserve(run_id, tokens, limit)
        return parked.value

    def settled(self, run_id: str, tokens: int, limit: str = "m") -> Reservation:
        """A call reserved and ended (charged at `tokens` whatever becomes of its lease)."""
        limits = self.limits(run_id)
        held: Reservation = limits.reserve(limit, tokens)
        limits.settle(held, tokens)
        return held

    def submit(self, *tasks: str) -> list[str]:
        return [self.runner.submit(SOLVER_REF, task) for task in tasks]

    def info(self) -> Any:
        [info] = self.runner.limits()
        return info


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def limited(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Limited]:
    clock = ManualClock()
    if request.param == "memory":
        with Runner(store=InMemoryStore(clock=clock), lease_seconds=LEASE) as runner:
            yield Limited(runner, clock)
        return
    for url in fresh_database(request, request.param, tmp_path):
        with Runner(url, clock=clock, lease_seconds=LEASE) as runner:
            yield Limited(runner, clock)


def test_a_concurrency_of_n_admits_n_calls_not_more(limited: Limited) -> None:
    limited.runner.set_limit("m", concurrency=2)
    first, second, third = limited.submit("a", "b", "c")
    assert limited.reserve(first, 10).id is not None
    assert limited.reserve(second, 10).id is not None
    limited.parks(third, 10)
    assert limited.info().in_flight == 2


def test_requests_per_minute_keep_first_come_order(limited: Limited) -> None:
    """One request a minute: of two runs waiting, the one that came first gets the next,
    even when the later one asks first."""
    limited.runner.set_limit("m", requests_per_minute=1)
    filler, early, late = limited.submit("filler", "early", "late")
    limited.settled(filler, 10)
    limited.parks(early, 10)
    limited.clock.advance(1)
    limited.parks(late, 10)
    limited.clock.advance(61)  # the filler's request has aged out: room for one
    limited.parks(late, 10)  # the early one is ahead of it
    assert limited.reserve(early, 10).id is not None


def test_a_call_larger_than_a_minutes_tokens_goes_through_alone(limited: Limited) -> None:
    """Never parked for ever: alone, a call over the whole minute's tokens is let through."""
    limited.runner.set_limit("m", tokens_per_minute=1_000)
    small, large = limited.submit("small", "large")
    limited.settled(small, 100)
    parked = limited.parks(large, 5_000)
    limited.clock.advance(parked.until - limited.clock.time())
    assert limited.reserve(large, 5_000).id is not None


def test_a_longer_retry_after_is_not_shortened_by_a_shorter_one(limited: Limited) -> None:
    limited.runner.set_limit("m", requests_per_minute=100)
    told, again, other = limited.submit("told", "again", "other")
    start = limited.clock.time()
    limited.limits(told).back_off("m", 20)
    limited.limits(again).back_off("m", 5)
    backoff = limited.info().backoff_until
    assert backoff is not None and backoff.timestamp() == pytest.approx(start + 20)
    limited.clock.advance(10)
    assert limited.parks(other, 10).until == pytest.approx(start + 20)
    # And a longer one does lengthen it.
    limited.limits(told).back_off("m", 30)
    assert limited.parks(other, 10).until == pytest.approx(start + 40)


def test_a_run_that_got_its_reservation_leaves_the_line(limited: Limited) -> None:
    limited.runner.set_limit("m", requests_per_minute=1)
    filler, waiter = limited.submit("filler", "waiter")
    limited.settled(filler, 10)
    limited.parks(waiter, 10)
    assert limited.info().waiting == 1
    limited.clock.advance(62)
    assert limited.reserve(waiter, 10).waited > 0
    assert limited.info().waiting == 0


def test_charges_age_out_at_the_minute_and_its_guard_not_a_second_early(
    limited: Limited,
) -> None:
    """A charge counts for the minute plus a second's guard (the provider sees a call a
    little after it was reserved): at 60.5 s it still counts, at 61.5 s it no longer does."""
    limited.runner.set_limit("m", tokens_per_minute=1_000)
    filler, next_one = limited.submit("filler", "next")
    start = limited.clock.time()
    limited.settled(filler, 1_000)
    limited.clock.advance(60.5)
    assert limited.info().tokens == 1_000
    parked = limited.parks(next_one, 100)
    assert parked.until == pytest.approx(start + 61)
    limited.clock.advance(1)
    assert limited.info().tokens == 0
    assert limited.reserve(next_one, 100).id is not None
