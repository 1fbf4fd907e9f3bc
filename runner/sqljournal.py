"""The durable journal: the loop's writes as fenced SQL transactions, plus the heartbeat."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from runner import fencing, leases, store
from runner.clock import SYSTEM, Clock
from runner.errors import LeaseLost
from runner.faults import fault
from runner.journal import Counters, Entry, EntryKind, Stop

Observer = Callable[[str, Entry], None]


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
        self._action_epochs = {
            entry.step: epoch for entry, epoch in journal if entry.kind is EntryKind.ACTION
        }
        self.seq = len(self._recorded)
        # Every write reports the run's cancel flag: the loop's check before each model call
        # costs no query of its own.
        self._cancel = claim.run.cancel_requested
        # One connection for the run's writes: no pool checkout (or ping) per step.
        self.connection = engine.connect()
        self.lost = threading.Event()
        self._stop_heartbeat = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @property
    def run_id(self) -> str:
        return self._run_id

    def recorded(self) -> Sequence[Entry]:
        return self._recorded

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self._check_lease()
        name = "final" if entry.kind is EntryKind.FINAL else str(entry.kind)
        fault(f"before_{name}_commit")
        self._cancel = fencing.append_entry(
            self.connection,
            self._run_id,
            self.epoch,
            self.seq,
            entry,
            stop,
            self.lease_seconds,
            self.clock,
        )
        self.seq += 1
        # Committed before the tool runs: a crash now leaves a pending call, never a lost one.
        fault(f"after_{name}_commit")
        if self.observer is not None:
            self.observer(self._run_id, entry)

    def finish(self, stop: Stop, counters: Counters) -> None:
        self._check_lease()
        fencing.finish_run(self.connection, self._run_id, self.epoch, stop, counters, self.clock)

    def cancel_requested(self) -> bool:
        self._check_lease()
        return self._cancel

    def attempt(self, action: Entry) -> int:
        # Every claim bumps the epoch; each claim since the action was written is one more
        # attempt at its tool call (the first was made by the worker that wrote it).
        written_by = self._action_epochs.get(action.step, self.epoch)
        return max(2, self.epoch - written_by + 1)

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
            renewed = leases.renew_lease(
                self.engine, self._run_id, self.epoch, self.lease_seconds, self.clock
            )
        except SQLAlchemyError:
            return True
        if not renewed:
            self.lost.set()
        return renewed
