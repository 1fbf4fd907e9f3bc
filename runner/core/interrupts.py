"""How a model call in flight learns that its run must stop (cancelled, or paused by a
graceful stop), so that it can give up at once instead of holding the run.

The loop sets, around each model call, a check that says why the run must stop (or None);
a model that reads a long answer piece by piece (the adapters) asks it between pieces and
raises `CallInterrupted`. A plain callable never asks, and is waited for as before.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Why the run must stop now: "cancelled", "paused", or None to go on.
StopCheck = Callable[[], "str | None"]

_check: contextvars.ContextVar[StopCheck | None] = contextvars.ContextVar(
    "runner_stop_check", default=None
)


class CallInterrupted(Exception):
    """A model call given up because its run was cancelled or paused (`reason`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the model call was given up: the run was {reason}")
        self.reason = reason


def stop_requested() -> str | None:
    """Why the current run must stop now ("cancelled", "paused"), or None."""
    check = _check.get()
    return None if check is None else check()


@contextmanager
def checking(check: StopCheck) -> Iterator[None]:
    """Make `check` the answer of stop_requested() for the calls made inside."""
    token = _check.set(check)
    try:
        yield
    finally:
        _check.reset(token)
