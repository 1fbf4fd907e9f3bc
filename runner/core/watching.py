"""One thread that watches every watched call in flight, instead of each caller waking itself.

A call given a `watch` (a model call, an interruptible tool) must give up once the watch
names a reason (a cancel, a pause), within about WATCH_EVERY seconds. Its caller used to
wake every WATCH_EVERY seconds to ask: a worker of a thousand runs in model calls then made
5,000 wake-ups a second, each a context switch and a turn at the GIL, which cost a third of
its CPU (docs/performance/workers.md, a thousand runs in one worker). Here one thread asks every
watch each WATCH_EVERY seconds and wakes only the callers whose watch names a reason; the
caller, woken, asks its watch again itself and raises, as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

# Why a call in flight must be given up now ("cancelled", "paused"), or None: asked every
# WATCH_EVERY seconds while a watched call runs.
Watch = Callable[[], str | None]
WATCH_EVERY = 0.2


class Wakeable(Protocol):
    def set(self) -> None: ...


class Watcher:
    """The watched calls in flight, each its watch and the signal its caller waits on.

    The thread starts with the first call watched and sleeps, asking nothing, while no call
    is watched. A watch that raises wakes its caller too: the caller's own ask raises it
    there, where it raised before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[Watch, Wakeable]] = {}
        self._some = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_key = 0

    def add(self, watch: Watch, wake: Wakeable) -> int:
        """Watch a call until `remove(key)`; `wake` is set if its watch names a reason."""
        with self._lock:
            key = self._next_key
            self._next_key += 1
            self._watched[key] = (watch, wake)
            self._some.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="runner-watch", daemon=True)
                self._thread.start()
        return key

    def remove(self, key: int) -> None:
        with self._lock:
            self._watched.pop(key, None)
            if not self._watched:
                self._some.clear()

    def _run(self) -> None:
        while True:
            self._some.wait()
            time.sleep(WATCH_EVERY)
            self._ask_each()

    def _ask_each(self) -> None:
        """Ask every watch once. A method of its own: its locals (the watches, and through
        them the runs they watch) go when it returns, not when the thread next wakes; the
        thread may sleep for ever once nothing is watched, and a run dropped unclosed would
        stay alive in its last look (its connections open)."""
        with self._lock:
            watched = list(self._watched.values())
        for watch, wake in watched:
            try:
                why = watch()
            except Exception:
                why = "raised"  # the caller asks again, and raises it where it waits
            if why is not None:
                # The call may have ended meanwhile: then its caller's next wait wakes once
                # for nothing and looks again, as after any stray wake-up.
                wake.set()


_watcher = Watcher()


def watcher() -> Watcher:
    return _watcher


def after_fork() -> None:
    """A forked child has none of its parent's threads: a watcher of its own."""
    global _watcher
    _watcher = Watcher()
