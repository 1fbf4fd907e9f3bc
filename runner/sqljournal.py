"""The durable journal: the loop's writes as fenced SQL transactions, plus the heartbeat.

The calls of a step of several record their observations from their own threads as they
end: writes take a lock, so one connection serves them one at a time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from runner import fencing, leases, store
from runner.backend import backend_for
from runner.backoff import Backoff
from runner.budgets import StopReason
from runner.clock import SYSTEM, Clock
from runner.errors import EntryRefused, LeaseLost, describe
from runner.faults import fault
from runner.journal import Counters, Entry, EntryKind, Stop
from runner.storage_errors import refused, transient

# Told of each entry after its commit, one at a time, on the thread that wrote it: a call's
# own thread for the outcomes of a step of several calls.
Observer = Callable[[str, Entry], None]

# A write that failed on a lost connection is tried again after these waits (doubling).
WRITE_RETRY_FIRST = 0.05
WRITE_RETRY_CAP = 2.0


class SqlJournal:
    """One run's journal while this worker holds its lease (epoch)."""

    def __init__(
        self,
        engine: Engine,
        claim: leases.Claim,
        *,
        lease_seconds: float,
        observer: Observer | None = None,
        clock: Clock = SYSTEM,
        heartbeat_seconds: float | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        # Real seconds between beats (a third of the lease unless a test wants it faster).
        self.heartbeat_seconds = heartbeat_seconds or lease_seconds / 3
        self._run_id = claim.run.id
        self.epoch = claim.epoch
        self.lease_seconds = lease_seconds
        self.observer = observer
        journal = store.load_entries(engine, self._run_id)
        self._recorded = [entry for entry, _ in journal]
        # Per step, the epoch since which its call may have been tried, and by how many
        # claims already: its action's writer tried it once; after a person's answer (the
        # last such entry of the step), no process has yet.
        self._call_epochs: dict[int, tuple[int, int]] = {}
        for entry, epoch in journal:
            if entry.kind is EntryKind.ACTION:
                self._call_epochs[entry.step] = (epoch, 1)
            elif entry.kind is EntryKind.ANSWER:
                self._call_epochs[entry.step] = (epoch, 0)
        # approval_timeout: how long a call of this run may wait for a person.
        self._parking = fencing.Parking(claim.run.budgets.get("approval_timeout"))
        self.seq = len(self._recorded)
        # Every write reports the run's cancel flag: the loop's check before each model call
        # costs no query of its own.
        self._cancel = claim.run.cancel_requested
        # One connection for the run's writes: no pool checkout (or ping) per step.
        self.connection = engine.connect()
        self._writing = threading.Lock()
        self.lost = threading.Event()
        # When the lease was last surely renewed: a write that failed on a lost connection is
        # tried again only while the lease lasts.
        self._renewed_at = clock.time()
        self._stop_heartbeat = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @property
    def run_id(self) -> str:
        return self._run_id

    def recorded(self) -> Sequence[Entry]:
        return self._recorded

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.append_many((entry,), stop)

    def wait(self, entry: Entry) -> bool:
        with self._writing:
            self._check_lease()
            fault("before_wait_commit")
            # The run is `waiting` once this commits: the lease is gone, so no heartbeat
            # renews it, and a crash from here on leaves a run that waits, not one to take over.
            cancelled = self._write((entry,), None, self._parking)
            self.seq += 1
            fault("after_wait_commit")
            if self.observer is not None:
                self.observer(self._run_id, entry)
        return not cancelled

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        with self._writing:
            self._check_lease()
            first = entries[0]
            name = "final" if first.kind is EntryKind.FINAL else str(first.kind)
            fault(f"before_{name}_commit")
            self._cancel = self._write(entries, stop)
            self.seq += len(entries)
            # Committed before the tool runs: a crash now leaves a pending call, never a lost
            # one (for a step of several calls, every call is pending at once).
            fault(f"after_{name}_commit")
            if self.observer is not None:
                for entry in entries:
                    self.observer(self._run_id, entry)

    def _write(
        self,
        entries: Sequence[Entry],
        stop: Stop | None,
        parking: fencing.Parking | None = None,
    ) -> bool:
        """Commit the entries; on a lost connection, try again while the lease lasts.

        A tool's result is worth keeping: dropping it on a short outage would turn a call
        that ran into OutcomeUnknown. A value the database refuses (not a blip: retrying
        cannot fix it) ends the run with the reason recorded, instead of leaving it to be
        taken over, asked the same question, and refused again until crash_loop.
        """
        backoff = Backoff(WRITE_RETRY_FIRST, WRITE_RETRY_CAP)
        retried = False
        while True:
            try:
                if self.connection.closed:  # closed after a lost connection: open anew
                    self.connection = self.engine.connect()
                cancel = fencing.append_entries(
                    self.connection,
                    self._run_id,
                    self.epoch,
                    self.seq,
                    entries,
                    stop,
                    self.lease_seconds,
                    self.clock,
                    parking,
                )
            except LeaseLost:
                raise
            except IntegrityError:
                # A retry of a write whose commit did happen (only its answer was lost): its
                # entries went in together, so the first one tells.
                written = fencing.entry_written(self.connection, self._run_id, self.seq, self.epoch)
                if not retried or written is None:
                    raise
                cancel = written
            except Exception as exc:
                if refused(exc):
                    self._give_up(entries[0], exc)
                if not transient(exc) or not self._lease_has(backoff.current * 2 + 1):
                    raise
                self._disconnect()
                self.clock.sleep(backoff.next())
                retried = True
                continue
            if backend_for(self.engine.dialect.name).writes_renew_lease:
                # The write renewed the lease if a third of it was spent.
                self._renewed_at = max(self._renewed_at, self.clock.time() - self.lease_seconds / 3)
            return cancel

    def _lease_has(self, seconds: float) -> bool:
        """Whether the lease surely lasts `seconds` more (with a margin for clock error)."""
        until = self._renewed_at + self.lease_seconds * 0.9
        return self.clock.time() + seconds < until

    def _disconnect(self) -> None:
        with contextlib.suppress(SQLAlchemyError):  # already broken: the pool discards it
            self.connection.close()

    def _give_up(self, entry: Entry, exc: BaseException) -> NoReturn:
        what = (
            "the model's output" if entry.kind is not EntryKind.OBSERVATION else "a tool's result"
        )
        error = f"{what} at step {entry.step} could not be journaled: {describe(exc)}"
        self._disconnect()  # the failed statement may have left the connection unusable
        self.connection = self.engine.connect()
        fencing.finish_run(
            self.connection,
            self._run_id,
            self.epoch,
            Stop(StopReason.MODEL_ERROR, error=error),
            entry.counters,
            self.clock,
        )
        raise EntryRefused(f"run {self._run_id} stopped: {error}") from None

    def finish(self, stop: Stop, counters: Counters) -> None:
        with self._writing:
            self._check_lease()
            fencing.finish_run(
                self.connection, self._run_id, self.epoch, stop, counters, self.clock
            )

    def cancel_requested(self) -> bool:
        self._check_lease()
        return self._cancel

    def attempt(self, action: Entry) -> int:
        # Every claim bumps the epoch; each claim since the action was written is one more
        # attempt at its tool call (the first was made by the worker that wrote it). After a
        # person's answer, counted from the answer: the first claim since makes attempt 1.
        since, tried = self._call_epochs.get(action.step, (self.epoch, 1))
        if tried == 0:
            return max(1, self.epoch - since)
        return max(2, self.epoch - since + tried)

    def _check_lease(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"run {self._run_id} was taken over by another worker")

    # -- heartbeat ------------------------------------------------------------------------

    def __enter__(self) -> SqlJournal:
        self._heartbeat = threading.Thread(
            target=self._beat, name=f"runner-heartbeat-{self._run_id}", daemon=True
        )
        self._heartbeat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_heartbeat.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        self.connection.close()

    def _beat(self) -> None:
        """Renew the lease during slow model and tool calls, at a third of its length."""
        while not self._stop_heartbeat.wait(self.heartbeat_seconds):
            if not self.beat():
                return

    def beat(self) -> bool:
        """Renew the lease once; False (and the journal marked lost) once another worker took
        the run. A database error keeps the lease as it was: it has slack for a blip."""
        try:
            started = self.clock.time()
            renewed = leases.renew_lease(
                self.engine, self._run_id, self.epoch, self.lease_seconds, self.clock
            )
        except SQLAlchemyError:
            return True
        if not renewed:
            self.lost.set()
        else:
            self._renewed_at = max(self._renewed_at, started)
        return renewed
