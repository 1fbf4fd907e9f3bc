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

    def stop(signum: int) -> None:
        stopping.set()
        wake.set()
        say(logging.INFO, f"worker {say.name}: {signal.Signals(signum).name}, stopping gracefully")

    _relay_signals(stop, second_exits=True)


def _relay_signals(act: Callable[[int], None], *, second_exits: bool) -> Callable[[], None]:
    """SIGTERM and SIGINT handed to `act` on a thread of its own; returns what puts the
    handlers before back and ends that thread.

    Python runs a signal's handler on the main thread between two of its bytecodes, even
    while that thread holds a plain lock: `Event.wait` holds its event's for a few bytecodes
    after it wakes. A handler that set that event would wait for its own thread, forever (a
    worker idle in its poll hung so once in a while). So the handler takes no lock: it writes
    the signal's number to a pipe, and the relay thread reads it and acts.
    """
    read_end, write_end = os.pipe()
    # Python may run the handler again inside itself when a second signal lands
    # mid-handler; next() on a counter is one C call, so exactly one call sees 0.
    signals_seen = itertools.count()

    def handle(signum: int, _frame: FrameType | None) -> None:
        if next(signals_seen) > 0 and second_exits:
            os._exit(128 + signum)
        os.write(write_end, bytes([signum]))

    def relay() -> None:
        with open(read_end, "rb", buffering=0) as pipe:
            while signums := pipe.read(16):
                for signum in signums:
                    act(signum)

    threading.Thread(target=relay, name="signals", daemon=True).start()
    before = {signum: signal.signal(signum, handle) for signum in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        os.close(write_end)  # the relay reads the end of its pipe and exits

    return restore


@contextlib.contextmanager
def _signals_set(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` while the worker waits for its database (a signal
    can be handled only on the main thread: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    restore = _relay_signals(lambda _signum: stop.set(), second_exits=False)
    try:
        yield
    finally:
        restore()
