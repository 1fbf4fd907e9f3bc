"""Where a charge's minute starts, on all three stores: the provider counts a call from when
the request reached it, which may be well after runner reserved it (a worker short of CPU
sent calls 2.2 s after reserving them in the crash soak, past the second of guard). So a
settled call counts for the minute after its settle (the provider had answered by then),
and one never settled (its worker died) for the minute after its reservation plus a grace
(runner.core.limits.UNSETTLED_GRACE_SECONDS)."""

from __future__ import annotations

import pytest

from runner.core.limits import COUNTED_SECONDS, UNSETTLED_GRACE_SECONDS

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
