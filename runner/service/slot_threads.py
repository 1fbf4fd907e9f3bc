"""A worker's slot threads: a thread for each run in flight, kept for the next claim once its
run ends, and never joined.

A run blocks for seconds at a time in its model and tool calls, so each run in flight has a
thread of its own (runner.service.worker). These used to be a ThreadPoolExecutor's, whose
threads are not daemon threads: each start looks through every live thread's shutdown lock
(`threading._maintain_shutdown_locks`, half a million looks to fill a thousand slots), and
its shutdown joins them one after another (about 50 ms for a thousand idle threads at the
end of a drain, each a wake-up and a turn at the GIL). The worker waits for its runs itself
(each slot's future, before serving ends), so nothing is left for a join to wait for: the
threads idle then are told to end, and left to do so.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable


class _Handoff:
    """One idle thread's mailbox: the next work it is given, or None to end."""

    __slots__ = ("_given", "work")

    def __init__(self) -> None:
        self.work: Callable[[], object] | None = None
        self._given = threading.Lock()
        self._given.acquire()

    def give(self, work: Callable[[], object] | None) -> None:
        self.work = work
        self._given.release()

    def take(self) -> Callable[[], object] | None:
        self._given.acquire()
        return self.work


class SlotThreads:
    """Daemon threads named `<prefix>_<n>`, each running one piece of work at a time; a
    thread whose work ended waits for the next, and ends once `close` is called."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._lock = threading.Lock()  # guards the idle threads, the count and `_closed`
        self._idle: list[_Handoff] = []
        self._started = 0
        self._closed = False

    def submit(self, work: Callable[[], object]) -> None:
        """Run `work` on an idle thread, or on a new one. What `work` raises is its own to
        report (a worker's slot puts it in the slot's future): here it is dropped, as a
        ThreadPoolExecutor's future that nobody reads drops it."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the slot threads are closed")
            if self._idle:
                self._idle.pop().give(work)  # the thread that idled last: its stack is warm
                return
            self._started += 1
            name = f"{self._prefix}_{self._started}"
        threading.Thread(target=self._serve, args=(work,), name=name, daemon=True).start()

    def __enter__(self) -> SlotThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def started(self) -> int:
        """How many threads were started (tests)."""
        return self._started

    def idle(self) -> int:
        """How many threads wait for work (tests)."""
        return len(self._idle)

    def close(self) -> None:
        """Tell the idle threads to end, and each busy one to end once its work has; wait
        for none of them. The idle ones end one after another, each telling the next (as a
        ThreadPoolExecutor's do): told all at once, a thousand threads woke together and
        held up the thread that closed them for 0.1 to 0.2 s, each taking its turn at the
        GIL."""
        with self._lock:
            self._closed = True
        self._end_next()

    def _end_next(self) -> None:
        with self._lock:
            handoff = self._idle.pop() if self._idle else None
        if handoff is not None:
            handoff.give(None)

    def _serve(self, work: Callable[[], object] | None) -> None:
        handoff = _Handoff()
        while work is not None:
            with contextlib.suppress(BaseException):  # the work's own to report (`submit`)
                work()
            work = None  # not kept alive while this thread idles
            with self._lock:
                if self._closed:
                    return
                self._idle.append(handoff)
            work = handoff.take()
        self._end_next()  # told to end: the next idle thread is told next
