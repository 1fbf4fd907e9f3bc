"""The rows of an `InMemoryStore`: runs and entries as the SQL store's columns hold them.

The parts of the store (runner.testing.memory_answers, memory_store) share these: the
`runs` and `entries` rows, the one lock that stands for the database's transactions, the
store's clock, and the wake-ups of waiters when a run is queued.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from runner.core.clock import Clock, ManualClock, utc_now
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.errors import RunnerError, RunNotFound
from runner.store.owner import this_process
from runner.store.payloads import PLAIN, Payloads
from runner.store.releases import OlderReleases
from runner.store.rows import RunRow, entry_of, entry_row, seal_task

Row = dict[str, Any]

# The columns of `runs` that a new run's row (runs.new_run) leaves out: NULL until set.
_NULLABLE = (
    "stop_reason",
    "output",
    "output_format",
    "error",
    "deadline",
    "lease_owner",
    "lease_expires_at",
    "leased_at",
    "finished_at",
    "last_seen_at",
    "waiting_since",
    "wait_expires_at",
)


class InMemoryStoreError(RunnerError):
    """What the in-memory store refuses where a database would (a run id taken twice in a
    bulk insert): the store's outage error, as SQLAlchemy's errors are the SQL store's."""


def json_value(value: Any) -> Any:
    """A value as a JSON column gives it back (tuples become lists, and so on)."""
    return json.loads(json.dumps(value))


class MemoryRows:
    """Runs and their journals as rows, under one lock, on one clock."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        owner: str | None = None,
        payloads: Payloads = PLAIN,
    ) -> None:
        self._clock: Clock = clock if clock is not None else ManualClock()
        # Every payload kept passes through these codecs, as in the SQL store.
        self.payloads = payloads
        self._owner = owner or this_process()
        self._lock = threading.RLock()
        self.runs: dict[str, Row] = {}
        self.entries: dict[str, list[Row]] = {}
        self.limits: dict[str, int | None] = {}
        # Each queue's policy for runs of another release (no entry: continue).
        self.older_releases: dict[str, OlderReleases] = {}
        # Each run's inbox (the `messages` table's rows), in the order they were sent.
        self.messages: dict[str, list[Row]] = {}
        # Provider limits (runner.testing.memory_limits): by name, reservations by id, the
        # runs in line by (limit, run id).
        self.provider_limits: dict[str, Row] = {}
        self.reservations: dict[str, Row] = {}
        self.limit_waiters: dict[tuple[str, str], Row] = {}
        self._listeners: set[threading.Event] = set()

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def owner(self) -> str:
        return self._owner

    def describe(self) -> str:
        return "memory (runner.testing.InMemoryStore)"

    def close(self) -> None:
        """Nothing to let go: the runs stay for the next runner on this store."""

    def load_entries(self, run_id: str, kinds: Sequence[EntryKind] = ()) -> list[tuple[Entry, int]]:
        with self._lock:
            rows = list(self.entries.get(run_id, ()))
        wanted = {str(kind) for kind in kinds}
        return [
            (entry_of(row), row["lease_epoch"])
            for row in rows
            if not wanted or row["kind"] in wanted
        ]

    def _now(self) -> datetime:
        return utc_now(self._clock)

    # -- rows -------------------------------------------------------------------------------

    def _row(self, run_id: str) -> Row:
        row = self.runs.get(run_id)
        if row is None:
            raise RunNotFound(f"no run with id {run_id}")
        return row

    def _run(self, run_id: str) -> RunRow:
        return RunRow.of(self._row(run_id))

    def _insert(self, row: Mapping[str, Any]) -> None:
        stored: Row = dict.fromkeys(_NULLABLE)
        stored["undelivered_messages"] = 0  # the column's server default
        stored.update(seal_task(row, self.payloads))
        stored["budgets"] = json_value(stored["budgets"])
        self.runs[stored["id"]] = stored
        self.entries[stored["id"]] = []

    def _append(self, run_id: str, epoch: int, entry: Entry, at: datetime) -> int:
        rows = self.entries[run_id]
        row = entry_row(run_id, len(rows), epoch, entry, at, self.payloads)
        row["args"] = json_value(row["args"])
        rows.append(row)
        return len(rows) - 1

    def _last_counters(self, run_id: str) -> tuple[int, int, float]:
        rows = self.entries[run_id]
        return (rows[-1]["steps"], rows[-1]["tokens"], rows[-1]["cost"]) if rows else (0, 0, 0.0)

    def _stopped(self, run_id: str, reason: StopReason, at: datetime) -> Row:
        steps, tokens, cost = self._last_counters(run_id)
        return {
            "status": RunStatus.FINISHED,
            "stop_reason": reason,
            "steps": steps,
            "tokens": tokens,
            "cost": cost,
            "finished_at": at,
        }

    def _wake(self) -> None:
        for event in list(self._listeners):
            event.set()


class MemoryWakeups:
    """Sets its event whenever the store queues a run (a submit, an answer, a release)."""

    def __init__(self, store: MemoryRows, event: threading.Event) -> None:
        self.store, self.event = store, event

    def start(self) -> bool:
        self.store._listeners.add(self.event)
        return True

    def close(self) -> None:
        self.store._listeners.discard(self.event)

    def __enter__(self) -> MemoryWakeups:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
