"""Time as a parameter: every lease, heartbeat and deadline reads a `Clock`.

Production uses the system clock (in memory) or the database's clock (durable runs, where
two machines compare the times they write); tests pass a `ManualClock` and move it by hand,
so no test sleeps to wait for an expiry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Seconds since the epoch, and a way to wait."""

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """This machine's clock."""

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM = SystemClock()


class SteadyClock:
    """This machine's wall clock, carried forward by its monotonic clock: a step of the wall
    clock (NTP correcting a large error, a VM resumed) does not move it.

    It follows the wall clock's slow corrections: every `refresh` seconds it takes the wall
    time again if the two differ by less than `tolerance`. A larger difference is a step,
    which it does not follow, so leases written before the step stay comparable with those
    written after it in every process that saw it. (A process started after the step reads
    the stepped time: on one machine, restart the workers after stepping its clock.)
    """

    def __init__(
        self,
        wall: Clock = SYSTEM,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        refresh: float = 60.0,
        tolerance: float = 1.0,
    ) -> None:
        self.wall = wall
        self.monotonic = monotonic
        self.refresh = refresh
        self.tolerance = tolerance
        self._lock = threading.Lock()
        self._anchor = wall.time() - monotonic()  # steady time minus monotonic time
        self._last_wall = wall.time()
        self._anchored_at = monotonic()
        self.steps_seen = 0

    def time(self) -> float:
        now = self.monotonic()
        if now - self._anchored_at > self.refresh:
            with self._lock:
                if now - self._anchored_at > self.refresh:
                    self._follow(now)
        return self.monotonic() + self._anchor

    def _follow(self, now: float) -> None:
        # What the wall clock moved since the last look, against what time really passed:
        # a small difference is a correction (followed), a large one a step (not).
        wall = self.wall.time()
        drift = (wall - self._last_wall) - (now - self._anchored_at)
        if abs(drift) < self.tolerance:
            self._anchor += drift
        else:
            self.steps_seen += 1
        self._last_wall, self._anchored_at = wall, now

    def sleep(self, seconds: float) -> None:
        self.wall.sleep(seconds)


STEADY = SteadyClock()


def utc_now(clock: Clock = SYSTEM) -> datetime:
    """The clock's time as an aware UTC datetime (what the store writes)."""
    return datetime.fromtimestamp(clock.time(), UTC)


class ManualClock:
    """A clock that moves only when told to: `advance(s)`, or a `sleep(s)` that advances.

    Sleeping advances the time at once instead of waiting, so a retry loop with backoff runs
    instantly in a test and its waits can be read back from `slept`.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def time(self) -> float:
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self._now += max(seconds, 0.0)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
