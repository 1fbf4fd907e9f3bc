"""Waiting on a condition, the one way the tests wait for something to happen.

A test that needs "the run exists", "the tool has started" or "the worker serves" polls for
it here, with a generous timeout that only a broken run reaches: no fixed sleep stands in
for it, so a machine whose cores are busy with other work makes a test slower, never wrong.

Every budget given here is stretched by the machine's load (`scaled`): a wait that takes
20 s on idle cores takes several times that while other suites keep them busy (CI machines
are shared), and a budget fixed for idle cores then fails a test that was only slow.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Long enough for a loaded CI machine; a condition that never comes fails after it.
GENEROUS = 120.0

# The most a budget is stretched: a broken run still fails the test within the hour.
MOST_STRETCH = 8.0


def load_factor() -> float:
    """How many times slower than on idle cores the machine runs now, roughly: the runnable
    processes (the last minute's load average) per core, 1 at least, MOST_STRETCH at most."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: no stretch
        return 1.0
    return min(MOST_STRETCH, max(1.0, load / (os.cpu_count() or 1)))


def scaled(seconds: float) -> float:
    """`seconds`, a budget enough on idle cores, stretched by the machine's load now."""
    return seconds * load_factor()


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = GENEROUS,
    what: str | Callable[[], str] = "the condition",
    every: float = 0.02,
) -> T:
    """Poll `condition` until it returns something true, and return that; fail the test
    with `what` (a text, or a function that says what was seen) after `timeout` seconds,
    stretched by the most load the machine had meanwhile (`scaled`)."""
    started = time.monotonic()
    budget = scaled(timeout)
    while True:
        value = condition()
        if value:
            return value
        # The most load seen while waiting counts: load that comes mid-wait slows it too.
        budget = max(budget, scaled(timeout))
        if time.monotonic() - started > budget:
            said = what() if callable(what) else what
            raise AssertionError(
                f"timed out after {budget:.0f}s ({timeout:g}s scaled by load) waiting for {said}"
            )
        time.sleep(every)
