"""Schedules: runs started on a cron schedule, one per tick (see runner.store.cron), kept
and fired by the store, through its protocol (runner.sql.schedules on a database).

Workers fire the ticks between claims (runner.service.housekeeping); this part of the
`Runner` adds, lists, pauses, resumes and removes schedules, and can fire the ticks due itself
(`fire_schedules`, what a worker does at each look of its loop).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runner.core.agent import Agent, with_budgets
from runner.defaults import DEFAULT_QUEUE
from runner.errors import AgentLoadError, ScheduleExists
from runner.service import submissions
from runner.service.runner_base import RunnerBase
from runner.store.cron import (
    CATCH_UP,
    OVERLAP,
    CatchUp,
    Overlap,
    check_choice,
    check_cron,
    check_schedule_name,
    check_timezone,
    next_tick,
)
from runner.store.rows import Fired, ScheduleRow
from runner.store.rules import check_priority, check_queue


class Scheduling(RunnerBase):
    """The `Runner`'s part that keeps schedules."""

    def add_schedule(
        self,
        name: str,
        agent: Agent | str,
        task: str,
        *,
        cron: str,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int | None = None,
        catch_up: CatchUp = "last",
        overlap: Overlap = "skip",
        **budgets: Any,
    ) -> ScheduleRow:
        """Start a run of `agent` on `task` at every tick of `cron` (five fields, read in
        `timezone`), in `queue` at `priority`, with the budgets given (else the agent's).

        Each tick's run has the id `NAME-YYYYMMDDTHHMM` (the tick in UTC). `catch_up`: what
        a tick found late runs (`last`: the latest tick due, once; `skip`: none, the next
        tick runs). `overlap`: a tick while the previous tick's run is unfinished is
        skipped (`skip`) or runs beside it (`allow`).
        """
        check_schedule_name(name)
        cron = check_cron(cron)
        check_timezone(timezone)
        check_choice("catch_up", catch_up, CATCH_UP)
        check_choice("overlap", overlap, OVERLAP)
        submissions.check_task(task)
        loaded = self._agent(agent)
        ref = loaded.reference()
        if ref is None:
            raise AgentLoadError(
                "a schedule's runs are started by workers: give the agent as a reference "
                "(module:attr or path.py:attr), or an Agent defined at module level"
            )
        chosen = with_budgets(budgets, loaded.budgets)
        now = self.now()
        row = {
            "name": name,
            "agent": ref,
            "agent_name": loaded.name,
            "release": loaded.release,
            "task": task,
            "budgets": chosen.as_dict(),
            "queue": DEFAULT_QUEUE if queue is None else check_queue(queue),
            "priority": 0 if priority is None else check_priority(priority),
            "cron": cron,
            "timezone": timezone,
            "catch_up": catch_up,
            "overlap": overlap,
            "paused": False,
            "next_tick_at": next_tick(cron, timezone, now),
            "created_at": now,
            "updated_at": now,
        }
        if not self.store.add_schedule(row):
            raise ScheduleExists(
                f"a schedule named {name!r} exists already (runner schedule rm {name} first)"
            )
        return self.store.schedule(name)

    def schedules(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        return self.store.schedules()

    def schedule(self, name: str) -> ScheduleRow:
        return self.store.schedule(name)

    def pause_schedule(self, name: str) -> ScheduleRow:
        """No tick of the schedule fires until it is resumed."""
        return self.store.pause_schedule(name, True, self.now())

    def resume_schedule(self, name: str) -> ScheduleRow:
        """Fire the schedule again, from its first tick after now (the ticks of its pause
        are not caught up)."""
        return self.store.pause_schedule(name, False, self.now())

    def remove_schedule(self, name: str) -> None:
        """Delete the schedule; the runs it started stay."""
        self.store.remove_schedule(name)

    def fire_schedules(self, now: datetime | None = None) -> list[Fired]:
        """Handle every tick due at `now` (default: the database's clock), as a worker does
        at each look: a run started, or a skip recorded, per schedule due."""
        return self.store.fire_schedules(self.now() if now is None else now)
