"""Waiting on a condition, the one way the tests wait for something to happen.

A test that needs "the run exists", "the tool has started" or "the worker serves" polls for
it here, with a generous timeout that only a broken run reaches: no fixed sleep stands in
for it, so a machine whose cores are busy with other work makes a test slower, never wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Long enough for a loaded CI machine; a condition that never comes fails after it.
GENEROUS = 120.0


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = GENEROUS,
    what: str | Callable[[], str] = "the condition",
    every: float = 0.02,
) -> T:
    """Poll `condition` until it returns something true, and return that; fail the test
    with `what` (a text, or a function that says what was seen) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g}s waiting for {said}")
        time.sleep(every)
