"""The journal of a run claimed from an `InMemoryStore`: the SQL journal's rules, in memory.

Every write is fenced by the claim's epoch (LeaseLost once another claim took the run), a
stop finishes the run in the same write, a wait parks it (or finishes it `cancelled` when a
cancel came first), and each write reports the run's cancel flag, as `SqlJournal` does. A
write renews the lease, as a journal write does on PostgreSQL (there is no heartbeat here:
a lease expires only when the store's clock is moved past it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.tree import ChildRun, Place, TreeStop
from runner.errors import LeaseLost
from runner.store.payloads import Payloads
from runner.store.protocol import Claim, Observer
from runner.store.rows import amount, counter, plain_text, sealed

if TYPE_CHECKING:
    from runner.testing.memory_messages import MemoryMessages


class MemoryRunJournal:
    """One run's journal while its claim (epoch) holds."""

    def __init__(
        self,
        store: MemoryMessages,
        claim: Claim,
        *,
        lease_seconds: float,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self._run_id = claim.run.id
        self.epoch = claim.epoch
        self.lease_seconds = lease_seconds
        self.observer = observer
        journal = store.load_entries(self._run_id)
        self._recorded = [entry for entry, _ in journal]
        # As SqlJournal: per step, the epoch since which its call may have been tried.
        self._call_epochs: dict[int, tuple[int, int]] = {}
        for entry, epoch in journal:
            if entry.kind is EntryKind.ACTION:
                self._call_epochs[entry.step] = (epoch, 1)
            elif entry.kind is EntryKind.ANSWER:
                self._call_epochs[entry.step] = (epoch, 0)
        self._approval_timeout = claim.run.budgets.get("approval_timeout")
        self.seq = len(self._recorded)
        self._cancel = claim.run.cancel_requested
        self._messages = claim.run.undelivered_messages
        self._writing = threading.Lock()

    @property
    def run_id(self) -> str:
        return self._run_id

    def __enter__(self) -> MemoryRunJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def recorded(self) -> Sequence[Entry]:
        return self._recorded

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.append_many((entry,), stop)

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        with self._writing:
            self._cancel = self._write(entries, stop, parking=False)
            self.seq += len(entries)
        self._tell(entries)

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        if not self._messages:
            return ()  # the last write heard of none
        with self._writing:
            delivered = self.store._deliver(self._run_id, self.epoch, step, counters)
            self.seq += len(delivered)
            self._messages = 0
        self._tell(delivered)
        return delivered

    # The in-memory store runs a sub-agent's child inline, inside the call (as run_agent
    # does): no child run is created, parked or delivered here.
    parks_children = False

    def place(self) -> Place:
        return Place()

    def tree_stop(self) -> TreeStop | None:
        return None

    def wait(self, entries: Sequence[Entry], children: Sequence[ChildRun] = ()) -> bool:
        with self._writing:  # a step's waits, one per call that needs an answer: one write
            cancelled = self._write(tuple(entries), None, parking=True)
            self.seq += len(entries)
        self._tell(entries)
        return not cancelled

    def finish(self, stop: Stop, counters: Counters) -> None:
        with self._writing, self.store._lock:
            row = self._fenced("not finishing it")
            row.update(self._finished(stop, counters, self.store._now(), self.store.payloads))

    def cancel_requested(self) -> bool:
        return self._cancel

    def attempt(self, action: Entry) -> int:
        since, tried = self._call_epochs.get(action.step, (self.epoch, 1))
        if tried == 0:
            return max(1, self.epoch - since)
        return max(2, self.epoch - since + tried)

    def _tell(self, entries: Sequence[Entry]) -> None:
        if self.observer is not None:
            for entry in entries:
                self.observer(self._run_id, entry)

    def _fenced(self, doing: str) -> dict[str, Any]:
        row = self.store.runs[self._run_id]
        if row["lease_epoch"] != self.epoch:
            raise LeaseLost(f"run {self._run_id} was taken over by another worker: {doing}")
        return row

    def _write(self, entries: Sequence[Entry], stop: Stop | None, *, parking: bool) -> bool:
        at = self.store._now()
        with self.store._lock:
            row = self._fenced("not writing")
            for entry in entries:
                self.store._append(self._run_id, self.epoch, entry, at)
            cancel = bool(row["cancel_requested"])
            self._messages = row["undelivered_messages"]
            row.update(lease_expires_at=at + timedelta(seconds=self.lease_seconds), last_seen_at=at)
            counters = entries[-1].counters
            if stop is not None:
                row.update(self._finished(stop, counters, at, self.store.payloads))
            elif parking and cancel:
                row.update(
                    self._finished(Stop(StopReason.CANCELLED), counters, at, self.store.payloads)
                )
            elif parking:
                timeout = self._approval_timeout
                row.update(
                    status=RunStatus.WAITING,
                    waiting_since=at,
                    wait_expires_at=None if timeout is None else at + timedelta(seconds=timeout),
                    updated_at=at,
                    lease_owner=None,
                    lease_expires_at=None,
                )
        return cancel

    @staticmethod
    def _finished(
        stop: Stop, counters: Counters, at: datetime, payloads: Payloads
    ) -> dict[str, Any]:
        output, fmt = sealed(stop.output, payloads)
        return {
            "status": RunStatus.FINISHED,
            "stop_reason": stop.reason,
            "output": output,
            "output_format": fmt,
            "error": plain_text(stop.error),
            "wrapped_up": stop.wrapped_up,
            "steps": counter(counters.steps),
            "tokens": counter(counters.tokens),
            "cost": amount(counters.cost),
            "updated_at": at,
            "finished_at": at,
            "lease_owner": None,
            "lease_expires_at": None,
        }
