"""Where a charge's minute starts, on all three stores: the provider counts a call from when
the request reached it, which may be well after runner reserved it (a worker short of CPU
sent calls 2.2 s after reserving them in the crash soak, past the second of guard). So a
settled call counts for the minute after its settle (the provider had answered by then),
and one never settled (its worker died) for the minute after its reservation plus a grace
(runner.core.limits.UNSETTLED_GRACE_SECONDS)."""

from __future__ import annotations

from typing import Any

import pytest

from runner.core.limits import COUNTED_SECONDS, UNSETTLED_GRACE_SECONDS
from runner.sql import limits as sql_limits

from .test_limit_rules import LEASE, Limited
from .test_limit_rules import limited as limited  # the fixture


def test_a_call_answered_late_counts_for_the_minute_after_its_settle(limited: Limited) -> None:
    limited.runner.set_limit("m", tokens_per_minute=1_000)
    late, next_one = limited.submit("late", "next")
    limits = limited.limits(late)
    held = limits.reserve("m", 1_000)
    limited.clock.advance(5)  # the request left late; the provider answered now
    settled = limited.clock.time()
    limits.settle(held, 1_000)
    limited.clock.advance(COUNTED_SECONDS - 5 + 0.5)  # a minute and its guard since reserving
    assert limited.info().tokens == 1_000
    parked = limited.parks(next_one, 100)
    assert parked.until == pytest.approx(settled + COUNTED_SECONDS)
    limited.clock.advance(5)
    assert limited.reserve(next_one, 100).id is not None


def test_a_call_never_settled_counts_past_its_minute_by_the_grace(limited: Limited) -> None:
    limited.runner.set_limit("m", tokens_per_minute=1_000)
    dead, next_one = limited.submit("dead", "next")
    start = limited.clock.time()
    limited.reserve(dead, 1_000)  # its worker dies: never settled, its lease lapses
    limited.clock.advance(COUNTED_SECONDS + 0.5)
    assert LEASE < COUNTED_SECONDS
    [info] = limited.runner.limits()
    assert (info.tokens, info.in_flight) == (1_000, 0)
    parked = limited.parks(next_one, 100)
    assert parked.until == pytest.approx(start + UNSETTLED_GRACE_SECONDS + COUNTED_SECONDS)
    limited.clock.advance(UNSETTLED_GRACE_SECONDS)
    assert limited.reserve(next_one, 100).id is not None


@pytest.fixture
def sweeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reservation sweeps its limit: the SQL store sweeps at most once a second of the
    process's own time, which a manual clock does not move (the in-memory one never does)."""
    monkeypatch.setattr(sql_limits, "SWEEP_SECONDS", 0.0)


def test_a_settle_heard_after_the_sweep_took_its_reservation_still_counts(
    limited: Limited, sweeping: None
) -> None:
    """A worker that lost its lease hears back from the provider long after the sweep
    deleted its reservation: the provider charged that usage, so it counts for the minute
    after the settle, as any settle's does. It holds no slot, and leaves the run alone."""
    limited.runner.set_limit("m", tokens_per_minute=1_000, concurrency=1)
    slow, other, next_one = limited.submit("slow", "other", "next")
    fenced = limited.limits(slow)
    held = fenced.reserve("m", 100)
    limited.clock.advance(200)  # past its lease, its minute, and the two the sweep keeps
    limited.settled(other, 10)  # a reservation, which sweeps the slow call's row away
    limited.limits(slow)  # another worker takes the run over: the first is fenced out
    before = run_state(limited, slow)
    settled = limited.clock.time()
    fenced.settle(held, 900)
    info = limited.info()
    assert (info.tokens, info.requests, info.in_flight) == (910, 2, 0)
    assert run_state(limited, slow) == before
    parked = limited.parks(next_one, 100)
    assert parked.until == pytest.approx(settled + COUNTED_SECONDS)


def test_a_settle_that_finds_its_reservation_past_its_minute_counts_once(
    limited: Limited, sweeping: None
) -> None:
    limited.runner.set_limit("m", tokens_per_minute=1_000)
    [slow] = limited.submit("slow")
    limits = limited.limits(slow)
    held = limits.reserve("m", 100)
    limited.clock.advance(90)  # its minute is over, its row not yet swept
    limits.settle(held, 300)
    assert (limited.info().tokens, limited.info().requests) == (300, 1)
    limits.settle(held, 300)  # told again (a write whose commit was in doubt): one call
    assert (limited.info().tokens, limited.info().requests) == (300, 1)


def test_a_late_settle_charges_its_limit_only_if_it_is_set(limited: Limited) -> None:
    """Removed, a limit's charges went with it: a settle heard since charges nothing. Set
    again, it is charged the settle's usage, as if the sweep had taken the row."""
    limited.runner.set_limit("m", tokens_per_minute=1_000)
    [slow] = limited.submit("slow")
    limits = limited.limits(slow)
    first, second = limits.reserve("m", 100), limits.reserve("m", 100)
    limited.runner.remove_limit("m")
    limits.settle(first, 300)
    assert limited.runner.limits() == []
    limited.runner.set_limit("m", tokens_per_minute=1_000)
    limits.settle(second, 200)
    assert (limited.info().tokens, limited.info().requests) == (200, 1)


def run_state(limited: Limited, run_id: str) -> tuple[Any, ...]:
    run = limited.runner.store.get_run(run_id)
    return (run.status, run.lease_owner, run.lease_epoch, run.lease_expires_at, run.updated_at)
