"""Rules of a schedule where it could break (see /work/notes/p40d.md for the bug planted
against each): a tick one worker handled is passed over by a second that found it due just
before (a forced interleaving, not a plan argument); a schedule paused across its ticks
and resumed does not catch them up."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import runner.sql.schedules as schedule_sql
from runner import Runner
from runner.core.clock import ManualClock

AGENT = f"{Path(__file__).resolve().with_name('agents.py')}:solver_agent"
HOUR = timedelta(hours=1)


def racing(monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> None:
    """The next worker to handle a tick it found due does `meanwhile` (another worker's
    doing) between its look for due ticks and its handling of the first."""
    handle = schedule_sql._fire
    done: list[bool] = []

    def late(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            meanwhile()
        return handle(*args, **kwargs)

    monkeypatch.setattr(schedule_sql, "_fire", late)


def test_a_tick_another_worker_handled_meanwhile_is_passed_over(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Runner(db_url) as runner, Runner(db_url) as other:
        tick = runner.add_schedule("hourly", AGENT, "t", cron="0 * * * *").next_tick_at
        theirs: list[Any] = []
        racing(monkeypatch, lambda: theirs.extend(other.fire_schedules(tick)))
        # Without the hook's turn: the other worker handles it first, inside this call.
        mine = runner.fire_schedules(tick)
        assert [f.run_id for f in theirs] == [f"hourly-{tick:%Y%m%dT%H%M}"]
        assert mine == []
        after = runner.schedule("hourly")
        assert (after.last_run_id, after.last_skip) == (theirs[0].run_id, None)
        assert len(runner.list(schedule="hourly")) == 1


def test_a_tick_of_a_schedule_paused_meanwhile_is_passed_over(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Runner(db_url) as runner, Runner(db_url) as other:
        tick = runner.add_schedule("hourly", AGENT, "t", cron="0 * * * *").next_tick_at
        racing(monkeypatch, lambda: other.pause_schedule("hourly"))
        assert runner.fire_schedules(tick) == []
        assert runner.list(schedule="hourly") == []


def test_a_schedule_resumed_after_a_pause_does_not_catch_up_its_ticks(db_url: str) -> None:
    """Paused over five ticks on the store's clock, then resumed: its next tick is the
    first after the resume, and nothing fires for the pause (catch_up 'last' would run the
    last missed tick of a schedule that was not paused)."""
    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        first = runner.add_schedule("hourly", AGENT, "t", cron="0 * * * *").next_tick_at
        runner.pause_schedule("hourly")
        clock.advance((first - runner.now()).total_seconds() + 5 * 3600 + 600)  # 5 ticks, +10 min
        resumed = runner.resume_schedule("hourly")
        assert resumed.next_tick_at == first + 6 * HOUR
        assert runner.fire_schedules() == []
        assert runner.list(schedule="hourly") == []
        (fired,) = runner.fire_schedules(first + 6 * HOUR)
        assert fired.run_id == f"hourly-{first + 6 * HOUR:%Y%m%dT%H%M}"
