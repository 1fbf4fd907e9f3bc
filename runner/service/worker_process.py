"""A worker's process: starting one while its database may not be there yet, and the
signals that stop it (`runner worker`, runner.cli.worker).

Apart from the serving loop (runner.service.worker) because it is about the process, not
the runs: a worker started before its database waits for it, and SIGTERM or SIGINT stop it
gracefully whether it serves or still waits.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Protocol, TypeVar

from runner.errors import DatabaseRefused, DatabaseUnavailable
from runner.service.database_wait import database_backoff
from runner.service.worker_log import WorkerLog, log


class Stoppable(Protocol):
    # Set by the first SIGTERM/SIGINT: finish the steps in flight, release, exit.
    stopping: threading.Event


Made = TypeVar("Made", bound=Stoppable)


def start_worker(make: Callable[[], Made], *, wait: bool) -> Made | None:
    """Make a worker; with `wait`, keep trying while the database cannot be reached.

    A worker started before its database (a machine booting, a failover) waits for it
    instead of exiting. A database that refuses it for good (DatabaseRefused: no such role
    or database, a bad password) and a schema at the wrong revision are not waited for:
    they are errors. SIGTERM or SIGINT while it waits: None, a stop like any other.
    """
    backoff = database_backoff()
    stop = threading.Event()
    with _signals_set(stop) if wait else contextlib.nullcontext():
        while True:
            try:
                made = make()
            except DatabaseRefused:
                raise
            except DatabaseUnavailable as exc:
                if not wait:
                    raise
                delay = backoff.next()
                log.warning(f"database unavailable, retrying in {delay:.1f}s: {exc}")
                if stop.wait(delay):
                    log.info("stopped while waiting for the database")
                    return None
                continue
            if stop.is_set():  # the signal came while it connected: serve() stops at once
                made.stopping.set()
            return made


def stop_on_signals(stopping: threading.Event, wake: threading.Event, say: WorkerLog) -> None:
    """First SIGTERM/SIGINT: set `stopping` (and `wake` the serving loop to see it).
    Second: exit at once (leases expire)."""

    # Python may run this handler again inside itself when a second signal lands
    # mid-handler; next() on a counter is one C call, so exactly one call sees 0.
    signals_seen = itertools.count()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if next(signals_seen) > 0:
            os._exit(128 + signum)
        stopping.set()
        wake.set()
        say(logging.INFO, f"worker {say.name}: {signal.Signals(signum).name}, stopping gracefully")

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


@contextlib.contextmanager
def _signals_set(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` while the worker waits for its database (a signal
    can be handled only on the main thread: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    for signum in handlers:
        signal.signal(signum, lambda _signum, _frame: stop.set())
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
