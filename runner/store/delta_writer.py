"""Handing a process's deltas to the `deltas` table: batched, off the loop's thread.

One `DeltaWriter` per store, one thread: a delta is queued where the adapter reads it (no
database work on that thread), and the thread writes what is queued in one transaction,
at once when it has been idle and at most once every DELTA_BATCH_SECONDS under a stream of
pieces, so a follower sees a piece within that time and a fast stream costs one commit per
batch, never one per piece. Deltas are best effort: a write that fails is dropped (a
follower misses those pieces; the journal still records the whole response), and a run
never waits more than FLUSH_WAIT_SECONDS for them.

`RunDeltas` is one run's sink, as the durable driver hands it to the loop: it deletes what a
crashed worker left of the run before its first piece, a step's earlier pieces when its call
begins afresh, and a call's pieces once its action is journaled (it observes the journal's
commits), and the rest when the run leaves this process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from runner.core.clock import Clock, utc_now
from runner.core.deltas import Delta
from runner.core.journal import Entry, EntryKind

# -- the changes a batch applies, in order (runner.sql.deltas writes them in SQL) --------

# The longest a delta is kept: one model call's longest (the adapters' total_timeout, 600 s,
# by default). Deltas of a call are deleted once its action is journaled, so only those a
# crash left behind, of a run no worker took up again, ever grow this old.
DELTA_KEEP_SECONDS = 600.0
# Every step, from the first: a Drop of a run's deltas whatever their step.
ALL_STEPS = (0, 2**31 - 1)


@dataclass(frozen=True, slots=True)
class Put:
    """Write one delta of run `run_id`, made at `at`."""

    run_id: str
    delta: Delta
    at: datetime


@dataclass(frozen=True, slots=True)
class Drop:
    """Delete run `run_id`'s deltas of steps `first` through `last`."""

    run_id: str
    first: int
    last: int


Change = Put | Drop


# -- the writer ------------------------------------------------------------------------------

# At most one write of deltas per this many seconds (a piece waits no longer than that).
DELTA_BATCH_SECONDS = 0.05
# How often a process writing deltas deletes those a crash left (see DELTA_KEEP_SECONDS).
DELTA_SWEEP_SECONDS = 60.0
# The longest a run's step waits for its deltas to be written before its action is.
FLUSH_WAIT_SECONDS = 5.0

# The entries that end a model call: its deltas are done with once one is journaled.
_CALL_ENDS = (EntryKind.ACTION, EntryKind.FINAL, EntryKind.REFUSED)


class DeltaWriter:
    """The thread that writes a process's deltas to one store (see the module's doc)."""

    def __init__(
        self,
        write: Callable[[list[Change]], None],
        sweep: Callable[[], object],
        clock: Clock,
        *,
        batch_seconds: float = DELTA_BATCH_SECONDS,
        sweep_seconds: float = DELTA_SWEEP_SECONDS,
    ) -> None:
        self._write = write
        self._sweep = sweep
        self.clock = clock
        self.batch_seconds = batch_seconds
        self.sweep_seconds = sweep_seconds
        self._queued: list[Change] = []
        self._submitted = 0  # changes queued so far, ever
        self._written = 0  # of which written (or dropped)
        self.dropped = 0  # batches a failed write lost
        self._urgent = False
        self._closed = False
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    def run(self, run_id: str) -> RunDeltas:
        """The sink of run `run_id`'s deltas in this process."""
        return RunDeltas(self, run_id)

    def submit(self, changes: list[Change]) -> None:
        with self._condition:
            if self._closed:
                return
            self._queued.extend(changes)
            self._submitted += len(changes)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="runner-deltas", daemon=True
                )
                self._thread.start()
            self._condition.notify_all()

    def flush(self) -> None:
        """Wait until every change queued so far is written (FLUSH_WAIT_SECONDS at most)."""
        with self._condition:
            target = self._submitted
            if self._written >= target:
                return
            self._urgent = True
            self._condition.notify_all()
            self._condition.wait_for(
                lambda: self._written >= target or self._closed, FLUSH_WAIT_SECONDS
            )

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(FLUSH_WAIT_SECONDS)

    def _serve(self) -> None:
        last_write = 0.0
        last_sweep = time.monotonic()
        while True:
            with self._condition:
                while not self._queued and not self._closed:
                    left = last_sweep + self.sweep_seconds - time.monotonic()
                    if left <= 0:
                        break
                    self._condition.wait(left)
                if not self._queued and self._closed:
                    return
                # A stream of pieces: one write per batch_seconds at most, unless a call
                # that ended waits for its pieces (or the writer closes).
                pause = last_write + self.batch_seconds - time.monotonic()
                if self._queued and pause > 0:
                    self._condition.wait_for(lambda: self._urgent or self._closed, pause)
                changes, self._queued = self._queued, []
                self._urgent = False
            if changes:
                last_write = time.monotonic()
                try:
                    self._write(changes)
                except Exception:  # best effort: the journal has the response regardless
                    self.dropped += 1
                with self._condition:
                    self._written += len(changes)
                    self._condition.notify_all()
            if time.monotonic() - last_sweep >= self.sweep_seconds:
                last_sweep = time.monotonic()
                with contextlib.suppress(Exception):  # the next sweep tries again
                    self._sweep()


class RunDeltas:
    """One run's deltas in this process: a `DeltaSink` for the loop, and an observer of its
    journal (see the module's doc)."""

    def __init__(self, writer: DeltaWriter, run_id: str) -> None:
        self.writer = writer
        self.run_id = run_id
        self._cleared = False  # what a crashed worker left of the run is deleted
        self._streaming: int | None = None  # the lowest step with deltas not yet deleted
        self._lock = threading.Lock()

    def delta(self, delta: Delta) -> None:
        changes: list[Change] = []
        with self._lock:
            if not self._cleared:
                changes.append(Drop(self.run_id, *ALL_STEPS))
                self._cleared = True
            elif delta.ordinal == 0:  # the call began afresh (a retry): forget the last try
                changes.append(Drop(self.run_id, delta.step, delta.step))
            if self._streaming is None or delta.step < self._streaming:
                self._streaming = delta.step
        changes.append(Put(self.run_id, delta, utc_now(self.writer.clock)))
        self.writer.submit(changes)

    def flush(self) -> None:
        self.writer.flush()

    def journaled(self, run_id: str, entry: Entry) -> None:
        """Told of each journal entry after its commit: a call's action deletes its deltas."""
        with self._lock:
            if (
                self._streaming is None
                or entry.kind not in _CALL_ENDS
                or entry.step < self._streaming
            ):
                return
            self._streaming = None
        self.writer.submit([Drop(self.run_id, 0, entry.step)])

    def close(self) -> None:
        """The run left this process (stopped, waiting, paused, its lease lost): none of its
        calls is in flight here any more."""
        with self._lock:
            if not self._cleared:
                return
            self._streaming = None
        self.writer.submit([Drop(self.run_id, *ALL_STEPS)])
