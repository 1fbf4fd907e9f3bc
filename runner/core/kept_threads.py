"""An Executor whose threads are kept between calls: for the sync functions a framework hands
to threads (Pydantic AI's tools and sync model functions, through its `using_thread_executor`).

A framework left to its own threads may start one for each call and end it with the task that
asked (anyio's workers end with their root task, and on runner's shared loop every call may
find a root of its own): a thread started, then woken, then ended, for every tool call, which
costs more than the rest of a framework step's bookkeeping. These threads wait for the next
call instead, and one idle for IDLE_SECONDS ends, so a burst leaves nothing behind. They are
daemon threads: a call still running never holds the process open at exit (Ctrl-C).
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class KeptThreads(Executor):
    """Daemon threads taking calls from one queue, a new one only when none is idle."""

    IDLE_SECONDS = 30.0

    def __init__(self, name: str = "runner-framework") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # One token for each thread waiting for a call and not yet promised one.
        self._idle = threading.Semaphore(0)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((future, fn, args, kwargs))
        if self._idle.acquire(blocking=False):
            return future  # a waiting thread takes it
        threading.Thread(target=self._serve, name=self._name, daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            try:
                future, fn, args, kwargs = self._jobs.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                # Leave only with a token no call was promised: a call put meanwhile has a
                # waiting thread (or started one), whichever thread takes it.
                if self._idle.acquire(blocking=False):
                    return
                continue
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # handed to the caller, never lost
                    future.set_exception(exc)
            del future, fn, args, kwargs
            self._idle.release()


def runs_in_context(fn: Callable[..., Any]) -> contextvars.Context | None:
    """The context `fn` runs its call in, when it is a context's `run` (what
    `loop.run_in_executor(executor, context.run, call)` hands an executor), else None."""
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, contextvars.Context) else None
