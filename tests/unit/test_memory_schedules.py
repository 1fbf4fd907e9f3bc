"""Schedules through the store's protocol: the `Runner` keeps them in whatever store it is
given (the SQL one: tests/integration/test_schedules.py), never through an engine."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runner import Runner
from runner.core.clock import ManualClock
from runner.errors import ScheduleExists, ScheduleNotFound
from runner.testing import InMemoryStore

AGENT = "tests.unit.memory_agents:solver_agent"
START = datetime(2026, 1, 5, 2, 30, tzinfo=UTC)


def test_a_runner_on_the_memory_store_keeps_pauses_and_removes_schedules() -> None:
    clock = ManualClock(START.timestamp())
    with Runner(store=InMemoryStore(clock=clock)) as runner:
        added = runner.add_schedule("nightly", AGENT, "add 2 and 3", cron="0 3 * * *")
        assert added.next_tick_at == datetime(2026, 1, 5, 3, 0, tzinfo=UTC)
        with pytest.raises(ScheduleExists):
            runner.add_schedule("nightly", AGENT, "again", cron="0 4 * * *")
        assert [s.name for s in runner.schedules()] == ["nightly"]

        assert runner.pause_schedule("nightly").paused
        clock.advance(24 * 3600)  # a day paused: its ticks are not caught up on resume
        resumed = runner.resume_schedule("nightly")
        assert not resumed.paused
        assert resumed.next_tick_at == datetime(2026, 1, 6, 3, 0, tzinfo=UTC)

        runner.remove_schedule("nightly")
        assert runner.schedules() == []
        with pytest.raises(ScheduleNotFound):
            runner.schedule("nightly")
