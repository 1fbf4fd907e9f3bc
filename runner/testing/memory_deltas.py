"""The in-memory store's `deltas` table: pieces of model calls in flight, as the SQL store
keeps them (ids that only grow, changes applied in order, a sweep by age)."""

from __future__ import annotations

import itertools
import threading
from datetime import datetime, timedelta

from runner.core.deltas import Delta
from runner.store.delta_writer import DELTA_KEEP_SECONDS, Change, Drop, Put


class MemoryDeltas:
    """Rows of (id, run id, delta, written at), under a lock of their own."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, Delta, datetime]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def write(self, changes: list[Change]) -> None:
        with self._lock:
            for change in changes:
                if isinstance(change, Put):
                    self.rows.append((next(self._ids), change.run_id, change.delta, change.at))
                else:
                    self.rows = [row for row in self.rows if not _dropped(row[1], row[2], change)]

    def after(self, run_id: str, after: int, limit: int) -> list[tuple[int, Delta]]:
        with self._lock:
            found = [(id, delta) for id, run, delta, _ in self.rows if run == run_id and id > after]
        return found[:limit]

    def sweep(self, now: datetime, keep_seconds: float = DELTA_KEEP_SECONDS) -> int:
        before = now - timedelta(seconds=keep_seconds)
        with self._lock:
            kept = [row for row in self.rows if row[3] >= before]
            gone = len(self.rows) - len(kept)
            self.rows = kept
        return gone


def _dropped(run_id: str, delta: Delta, drop: Drop) -> bool:
    return run_id == drop.run_id and drop.first <= delta.step <= drop.last
