"""Waking idle workers when a run is queued: PostgreSQL's LISTEN/NOTIFY, on a thread.

`Listener` is the machinery (a thread LISTENing on one dedicated connection, reopened after
any error); `Wakeup` is the workers' listener, and runner.sql.follows the followers'.

`runner submit`, an answer and a worker giving a run back NOTIFY in their own transaction
(`Backend.wake_workers`); a `Wakeup` thread LISTENs on a dedicated connection and sets an
event, which an idle worker waits on beside its poll interval. So a queued run starts in
milliseconds while the worker still polls rarely. The connection is reopened after any
error, and a worker loses nothing meanwhile: its polling finds whatever it did not hear of.
On SQLite there is nothing to listen to: `Wakeup.start` starts no thread and workers poll.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from sqlalchemy import Engine

from runner.core.backoff import Backoff
from runner.errors import first_line
from runner.sql.backend import WAKE_CHANNEL, Listening, backend_for

# Between two waits for a notification, the thread looks whether it was asked to stop.
LISTEN_SLICE = 0.25
# Reconnecting after an error: doubling waits, capped.
RECONNECT_FIRST = 0.1
RECONNECT_CAP = 2.0


class Listener:
    """A thread that LISTENs on `channel` while started, on a connection of its own, and
    calls `heard` with what it hears; `connected` each time it (re)opens its connection
    (whatever was announced meanwhile went unheard), and `tick` at least every LISTEN_SLICE
    seconds (on the thread, between two waits)."""

    channel = WAKE_CHANNEL
    # What a log line says it listens for.
    purpose = "new runs"

    def __init__(self, engine: Engine, *, log: Callable[[str], None] | None = None) -> None:
        self.engine = engine
        self.log = log or (lambda line: None)
        self.backend = backend_for(engine.dialect.name)
        # Set while the thread holds a LISTEN connection; how many it opened (for tests).
        self.listening = threading.Event()
        self.connections = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start listening; False (and no thread) where the database cannot notify."""
        if not self.backend.notifies:
            return False
        name = f"runner-{self.channel.removeprefix('runner_')}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        return True

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Listener:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        backoff = Backoff(RECONNECT_FIRST, RECONNECT_CAP, jitter=True)
        while not self._stop.is_set():
            listening: Listening | None = None
            try:
                listening = self.backend.listen(self.engine, self.channel)
                if listening is not None:
                    # Counted before `connected`, which may wake a thread that reads it.
                    self.connections += 1
                    self.connected()
            except Exception as exc:
                if listening is not None:
                    self._close(listening)
                delay = backoff.next()
                self.log(
                    f"cannot listen for {self.purpose}, retrying in {delay:.1f}s: {first_line(exc)}"
                )
                self._stop.wait(delay)
                continue
            if listening is None:
                return
            self.listening.set()
            try:
                while not self._stop.is_set():
                    heard = listening.wait(LISTEN_SLICE)
                    if heard:
                        self.heard(heard)
                    self.tick()
                    backoff.reset()
            except Exception as exc:
                self._close(listening)
                delay = backoff.next()
                self.log(
                    f"stopped listening for {self.purpose}, again in {delay:g}s: {first_line(exc)}"
                )
                self._stop.wait(delay)
            finally:
                self._close(listening)

    def connected(self) -> None:
        """Called on the thread once LISTENing, before any `heard`; an error here closes the
        connection and tries again later."""

    def heard(self, payloads: list[str]) -> None:
        """Called on the thread with the payloads of the notifications just heard."""

    def tick(self) -> None:
        """Called on the thread between two waits (at least every LISTEN_SLICE seconds)."""

    def _close(self, listening: Listening) -> None:
        self.listening.clear()
        with contextlib.suppress(Exception):  # a broken connection may fail to close
            listening.close()


class Wakeup(Listener):
    """Sets `event` each time a run is announced as queued, while started."""

    def __init__(
        self,
        engine: Engine,
        event: threading.Event,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(engine, log=log)
        self.event = event

    def connected(self) -> None:
        # Runs announced while nobody listened (before the first LISTEN, or during an
        # outage): one look at the queue finds them.
        self.event.set()

    def heard(self, payloads: list[str]) -> None:
        self.event.set()
