"""Time as a parameter: every lease, heartbeat and deadline reads a `Clock`.

Production uses the system clock (in memory) or the database's clock (durable runs, where
two machines compare the times they write); tests pass a `ManualClock` and move it by hand,
so no test sleeps to wait for an expiry.
"""

from __future__ import annotations

import threading
import time
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
