"""SteadyClock follows the wall clock's slow corrections and none of its steps."""

from __future__ import annotations

from runner.core.clock import ManualClock, SteadyClock


def test_a_step_is_not_followed_and_a_slow_correction_is() -> None:
    wall = ManualClock(1_000.0)
    ticks = ManualClock(5.0)  # the monotonic clock
    steady = SteadyClock(wall, monotonic=ticks.time, refresh=60.0, tolerance=1.0)
    assert steady.time() == 1_000.0
    wall.advance(35.0)  # a step: the wall jumps, the monotonic clock does not
    assert steady.time() == 1_000.0
    ticks.advance(61.0)
    wall.advance(61.0)
    assert steady.time() == 1_061.0 and steady.steps_seen == 1  # still not followed
    ticks.advance(61.0)
    wall.advance(61.5)  # a slow correction of half a second: followed
    assert steady.time() == 1_000.0 + 61.0 + 61.5


def test_a_backward_step_of_the_wall_clock_is_not_followed_either() -> None:
    """NTP setting the wall clock an hour back moves the steady clock no more than an hour
    forward would: leases written before it stay comparable with those written after."""
    wall = ManualClock(10_000.0)
    ticks = ManualClock(5.0)
    steady = SteadyClock(wall, monotonic=ticks.time, refresh=60.0, tolerance=1.0)
    wall.advance(-3_600.0)
    ticks.advance(61.0)
    wall.advance(61.0)
    assert steady.time() == 10_061.0 and steady.steps_seen == 1
    ticks.advance(61.0)
    wall.advance(60.5)  # a slow correction backwards, half a second: followed
    assert steady.time() == 10_000.0 + 61.0 + 60.5
