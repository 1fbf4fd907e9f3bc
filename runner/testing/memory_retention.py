"""Retention in an `InMemoryStore`: finished runs deleted by the rules of their queue.

As runner.sql.retention does in SQL, by the same rules (runner.store.rules: `effective`
falls back on the default `*`, `cutoff` says which finished runs go): only finished runs
whose whole tree is finished, oldest first, at most BATCHES_PER_PASS batches of BATCH_SIZE
runs a pass, each run with its journal and inbox.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runner.core.status import RunStatus
from runner.store.blob_sweep import Swept, named_blobs, offload_stores, sweep
from runner.store.rules import (
    BATCH_SIZE,
    BATCHES_PER_PASS,
    Expired,
    Rules,
    check_keep_runs,
    check_keep_seconds,
    check_rules_name,
    cutoff,
    effective,
)
from runner.testing.memory_rows import MemoryRows, Row


class MemoryRetention(MemoryRows):
    """The in-memory store's retention rules, and their passes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.retention: dict[str, Rules] = {}

    def set_retention(self, name: str, rules: Rules) -> None:
        name = check_rules_name(name)
        checked = Rules(check_keep_seconds(rules.keep_seconds), check_keep_runs(rules.keep_runs))
        with self._lock:
            self.retention[name] = checked

    def prune_expired(self, now: datetime) -> Expired:
        done = Expired()
        room = BATCH_SIZE * BATCHES_PER_PASS
        with self._lock:
            rules = {name: rule for name, rule in self.retention.items() if rule}
            if not rules:
                return done
            finished = [row for row in self.runs.values() if row["status"] == RunStatus.FINISHED]
            for queue in sorted({row["queue"] for row in finished}):
                chosen = effective(rules, queue)
                if not chosen or room <= 0:
                    continue
                gone = self._expired(queue, chosen, now, finished)[:room]
                for row in gone:
                    self._delete(row["id"])
                room -= len(gone)
                done.runs += len(gone)
                done.queues[queue] += len(gone)
        return done

    def _expired(self, queue: str, rules: Rules, now: datetime, finished: list[Row]) -> list[Row]:
        mine = sorted(
            (row for row in finished if row["queue"] == queue), key=lambda row: row["finished_at"]
        )
        keep = rules.keep_runs
        oldest_kept = mine[-keep]["finished_at"] if keep and len(mine) >= keep else None
        chosen = cutoff(rules, now, oldest_kept)
        if chosen is None:
            return []
        return [
            row
            for row in mine
            if chosen.deletes(row["finished_at"]) and self._tree_finished(row["root_id"])
        ]

    def _tree_finished(self, root_id: str) -> bool:
        return all(
            row["status"] == RunStatus.FINISHED
            for row in self.runs.values()
            if row["root_id"] == root_id
        )

    def _delete(self, run_id: str) -> None:
        del self.runs[run_id]
        self.entries.pop(run_id, None)
        self.messages.pop(run_id, None)

    def sweep_blobs(self, older_than: datetime, *, dry_run: bool = False) -> Swept:
        def named() -> set[tuple[str, str]]:
            with self._lock:
                values: list[object] = []
                for row in self.runs.values():
                    values += [row.get("task"), row.get("output")]
                for rows in self.entries.values():
                    values += [value for row in rows for value in (row["content"], row["args"])]
                for inbox in self.messages.values():
                    values += [message["body"] for message in inbox]
            return named_blobs(values)

        return sweep(offload_stores(self.payloads), older_than, named, dry_run=dry_run)
