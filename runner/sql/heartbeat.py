"""One heartbeat for every lease a runner holds: one statement a beat, whatever their number.

A worker with a thousand runs in flight renews their thousand leases with one UPDATE of the
held (run id, epoch) pairs every beat, on one thread, and learns from what it returns which
runs another worker took: those journals are marked lost, and their next write raises
LeaseLost. A foreground `Runner.run` uses the same heartbeat with its one lease. The thread
runs while something is held and stops once nothing has been held for LINGER_SECONDS.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from runner.core.clock import SYSTEM, Clock
from runner.sql import lease_renewals, writer

# How long the thread waits for another lease once the last is let go, before it stops: a
# worker's slot goes from run to run along a tree (runner.store.rules.Relay), each letting
# its lease go just before the next is held, and starting a thread for each cost more than
# the rest of taking a run up.
LINGER_SECONDS = 1.0


class Held(Protocol):
    """A lease a heartbeat renews: a run's journal while it runs."""

    @property
    def run_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    def renewed(self, started: float) -> None:
        """The lease was renewed by a beat that started at `started` (clock seconds)."""

    def taken_over(self) -> None:
        """Another worker holds the run now: stop writing."""

    # Optional: `cancel_asked()`, told when a beat finds the run asked to cancel.


class Heartbeat:
    """Renews the leases held through it every `interval` real seconds, all at once."""

    def __init__(
        self, engine: Engine, *, lease_seconds: float, interval: float, clock: Clock = SYSTEM
    ) -> None:
        self.engine = engine
        self.lease_seconds = lease_seconds
        self.interval = interval
        self.clock = clock
        self._held: dict[str, Held] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def hold(self, lease: Held) -> None:
        """Renew `lease` from the next beat on, until `drop`."""
        with self._changed:
            lingers = not self._held
            self._held[lease.run_id] = lease
            # Only a thread that lingers (nothing held) waits for a lease to come: woken at
            # every hold, the thread woke a thousand times to fill a thousand slots, each a
            # turn at the GIL while the runs started.
            if lingers:
                self._changed.notify_all()  # it goes on beating
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="runner-heartbeat", daemon=True
                )
                self._thread.start()

    def drop(self, lease: Held) -> None:
        with self._changed:
            if self._held.get(lease.run_id) is lease:
                del self._held[lease.run_id]
            if not self._held:
                self._changed.notify_all()  # nothing to renew: the thread waits, then stops

    def close(self) -> None:
        """Stop beating (the leases still held expire unless let go)."""
        with self._changed:
            self._closed = True
            thread = self._thread
            self._changed.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closed or not self._held, self.interval)
                if not self._closed and not self._held:
                    self._changed.wait_for(lambda: self._closed or bool(self._held), LINGER_SECONDS)
                    if not self._closed and self._held:
                        continue  # a lease came: its first beat an interval from now
                if self._closed or not self._held:
                    self._thread = None
                    return
            self.beat()

    def beat(self, only: Sequence[Held] | None = None) -> None:
        """Renew every lease held (or `only` those), in one statement. A database error
        keeps the leases as they were: they have slack for a blip, and the next beat tries
        again."""
        with self._changed:
            held = dict(self._held) if only is None else {lease.run_id: lease for lease in only}
        if not held:
            return
        started = self.clock.time()
        epochs = {run_id: lease.epoch for run_id, lease in held.items()}
        try:
            with writer.writing(self.engine):
                renewed = lease_renewals.renew_leases(
                    self.engine, epochs, self.lease_seconds, self.clock
                )
        except SQLAlchemyError:
            return
        for run_id, lease in held.items():
            if run_id in renewed:
                lease.renewed(started)
                if renewed[run_id]:
                    cancelled = getattr(lease, "cancel_asked", None)
                    if cancelled is not None:  # a fake lease may not listen for cancels
                        cancelled()
            else:
                lease.taken_over()
