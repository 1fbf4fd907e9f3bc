"""How a model call in flight learns that its run must stop (cancelled, or paused by a
graceful stop), so that it can give up at once instead of holding the run.

The loop sets, around each model call, a check that says why the run must stop (or None);
a model that reads a long answer piece by piece (the adapters) asks it between pieces and
raises `CallInterrupted`. A plain callable never asks, and is waited for as before.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from contextlib import AbstractContextManager

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


def checking(check: StopCheck) -> AbstractContextManager[None]:
    """Make `check` the answer of stop_requested() for the calls made inside."""
    return _Checking(check)


class _Checking:
    """`checking`'s context: a class, not a generator's context, since every model call
    enters one and a generator's costs about three times as much (the in-memory step)."""

    __slots__ = ("_given", "_token")

    def __init__(self, check: StopCheck) -> None:
        self._given = check
        self._token: contextvars.Token[StopCheck | None] | None = None

    def __enter__(self) -> None:
        self._token = _check.set(self._given)

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _check.reset(self._token)
