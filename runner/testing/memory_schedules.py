"""Schedules of an `InMemoryStore`: kept, listed, paused, removed and fired.

As runner.sql.schedules does in SQL, by the same rules (runner.store.cron's `handle_due`):
a due tick starts its run (id `NAME-YYYYMMDDTHHMM`, so a tick runs once however many
workers fire it) or records why it was skipped, and moves the schedule past `now`, all
under the store's lock as the SQL store does in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from runner.core.status import RunStatus
from runner.errors import ScheduleNotFound
from runner.store.cron import after_tick, handle_due, next_tick, tick_run
from runner.store.rows import Fired, ScheduleRow, seal_task
from runner.testing.memory_rows import MemoryRows, Row

# As many schedules as one look of a worker fires in SQL (runner.sql.schedules).
FIRES_PER_LOOK = 20


class MemorySchedules(MemoryRows):
    """The in-memory store's schedules."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._schedules: dict[str, Row] = {}

    def add_schedule(self, row: Mapping[str, Any]) -> bool:
        with self._lock:
            if row["name"] in self._schedules:
                return False
            # The columns the table defaults (the last tick, its run) start empty, as there.
            empty = dict.fromkeys(ScheduleRow.__dataclass_fields__)
            self._schedules[row["name"]] = {**empty, **seal_task(row, self.payloads)}
            return True

    def schedules(self) -> list[ScheduleRow]:
        with self._lock:
            return [ScheduleRow.of(self._schedules[name]) for name in sorted(self._schedules)]

    def schedule(self, name: str) -> ScheduleRow:
        with self._lock:
            return ScheduleRow.of(self._schedule_row(name))

    def pause_schedule(self, name: str, paused: bool, now: datetime) -> ScheduleRow:
        # As the SQL store does: resumed, it fires from its first tick after now.
        with self._lock:
            row = self._schedule_row(name)
            if row["paused"] and not paused:
                row["next_tick_at"] = next_tick(row["cron"], row["timezone"], now)
            row.update(paused=paused, updated_at=now)
            return ScheduleRow.of(row)

    def remove_schedule(self, name: str) -> None:
        with self._lock:
            self._schedule_row(name)
            del self._schedules[name]

    def fire_schedules(self, now: datetime) -> list[Fired]:
        """Fire the ticks due at `now`; the runs are created at the store's clock (the
        ticks may be fired on another: a test's, or `runner schedule fire --at`)."""
        fired: list[Fired] = []
        recorded_at = self._now()
        with self._lock:
            due = sorted(
                (row for row in self._schedules.values() if self._due(row, now)),
                key=lambda row: row["next_tick_at"],
            )
            for row in due[:FIRES_PER_LOOK]:
                fired.append(self._fire(row, now, recorded_at))
        if any(one.run_id is not None for one in fired):
            self._wake()
        return fired

    def next_tick(self) -> datetime | None:
        with self._lock:
            ticks = [row["next_tick_at"] for row in self._schedules.values() if not row["paused"]]
        return min(ticks, default=None)

    def _due(self, row: Row, now: datetime) -> bool:
        return not row["paused"] and row["next_tick_at"] <= now

    def _fire(self, row: Row, now: datetime, recorded_at: datetime) -> Fired:
        schedule = ScheduleRow.of(row)
        handled = handle_due(
            schedule,
            now,
            still_going=lambda run_id: (
                run_id in self.runs and self.runs[run_id]["status"] != RunStatus.FINISHED
            ),
            exists=lambda run_id: run_id in self.runs,
        )
        if handled.run_id is not None:
            self._insert(tick_run(schedule, handled.run_id, recorded_at))
        row.update(after_tick(schedule, handled, recorded_at))
        return Fired(schedule.name, handled.tick, handled.run_id, handled.skipped)

    def _schedule_row(self, name: str) -> Row:
        row = self._schedules.get(name)
        if row is None:
            raise ScheduleNotFound(f"no schedule named {name!r} (runner schedule list)")
        return row
