"""One follower's registration with its store's watcher of runs: woken when its run may
have moved. The SQL store's watcher (`Followers`: a LISTEN on PostgreSQL, a poller on
SQLite) is in runner.sql.follows; a store without one returns no registration, and its
followers poll.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.service.events`, `runner.service.tree_events`, `runner.cli.follow`.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    # Only an async follower needs asyncio: `runner list`, which loads this module with the
    # store's contract, would pay some 20 ms importing it (with ssl).
    import asyncio


class Watcher(Protocol):
    """What a registration is held by: the watcher that wakes it, and forgets it on close."""

    def unfollow(self, follow: Follow) -> None: ...


class Follow:
    """One follower's registration: woken when its run may have moved. `seen()` before a
    read, then `wait(seen)` (or `await wait_async(seen)`) returns once woken after it."""

    def __init__(self, followers: Watcher, run_id: str, poll_seconds: float) -> None:
        self.followers = followers
        self.run_id = run_id
        self.poll_seconds = poll_seconds
        self._woken = 0  # how many times woken
        self._condition = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_event: asyncio.Event | None = None

    def seen(self) -> int:
        """The wakes so far: take it before reading, wait for one after it."""
        return self._woken

    def wake(self) -> None:
        """The run may have moved (or the follower should look again): wake its waits."""
        with self._condition:
            self._woken += 1
            self._condition.notify_all()
            loop, event = self._loop, self._async_event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(event.set)

    def wait(self, seen: int, timeout: float | None = None) -> bool:
        """Block until woken after `seen` (True) or `timeout` seconds pass (False)."""
        with self._condition:
            return self._condition.wait_for(lambda: self._woken != seen, timeout)

    async def wait_async(self, seen: int, timeout: float | None = None) -> bool:
        """`wait` for an event loop: it is never blocked."""
        import asyncio

        if self._async_event is None:
            with self._condition:
                self._loop = asyncio.get_running_loop()
                self._async_event = asyncio.Event()
        event = self._async_event
        while self._woken == seen:
            event.clear()
            if self._woken != seen:  # woken between the look and the clear
                break
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except TimeoutError:
                return False
        return True

    def close(self) -> None:
        self.followers.unfollow(self)
