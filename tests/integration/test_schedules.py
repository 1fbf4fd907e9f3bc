"""Schedules on both databases, on a simulated clock: a tick's run is started once, whoever
fires it and however often; late ticks follow the schedule's catch-up rule, ticks during an
unfinished run its overlap rule; pause, resume and remove; a schedule's runs listed and
counted together.

Time is a parameter: every firing here passes the moment it happens at (`fire_schedules(now)`),
so no test waits for a tick. tests/acceptance/test_schedule_fleet.py fires the same ticks
from worker processes killed at random.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner import RequestRefused, Runner, ScheduleExists, ScheduleNotFound

AGENTS = Path(__file__).resolve().with_name("agents.py")
AGENT = f"{AGENTS}:solver_agent"
HOUR = timedelta(hours=1)


def hourly(runner: Runner, name: str = "hourly", **options: object) -> datetime:
    """An hourly schedule; its first tick."""
    added = runner.add_schedule(name, AGENT, "What is 2 + 3?", cron="0 * * * *", **options)  # type: ignore[arg-type]
    return added.next_tick_at


def finish(runner: Runner, run_id: str) -> None:
    """Run the tick's run to its end, here."""
    assert runner.resume(run_id).stop_reason == "final"


def test_a_schedule_is_added_listed_paused_resumed_and_removed(db_url: str) -> None:
    with Runner(db_url) as runner:
        added = runner.add_schedule(
            "nightly",
            AGENT,
            "Summarise the day",
            cron="0 2 * * *",
            timezone="Europe/Paris",
            queue="reports",
            priority=3,
            catch_up="skip",
            overlap="allow",
            max_steps=4,
        )
        assert (added.cron, added.timezone, added.queue, added.priority) == (
            "0 2 * * *",
            "Europe/Paris",
            "reports",
            3,
        )
        assert (added.catch_up, added.overlap, added.paused) == ("skip", "allow", False)
        assert added.budgets["max_steps"] == 4 and added.agent_name == "solver"
        # 02:00 in Paris is 01:00 UTC in winter: the tick is read in the schedule's zone.
        assert added.next_tick_at.hour in (0, 1) and added.next_tick_at.minute == 0
        assert added.next_tick_at > runner.now()
        assert [s.name for s in runner.schedules()] == ["nightly"]
        with pytest.raises(ScheduleExists):
            runner.add_schedule("nightly", AGENT, "again", cron="* * * * *")
        assert runner.pause_schedule("nightly").paused
        assert runner.fire_schedules(added.next_tick_at + timedelta(days=3)) == []
        resumed = runner.resume_schedule("nightly")
        assert not resumed.paused and resumed.next_tick_at == added.next_tick_at
        runner.remove_schedule("nightly")
        assert runner.schedules() == []
        with pytest.raises(ScheduleNotFound):
            runner.remove_schedule("nightly")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "a name with spaces"),
        ("name", "x" * 19),  # NAME-YYYYMMDDTHHMM would not fit a run id
        ("cron", "61 * * * *"),
        ("cron", "0 0 * * * *"),  # six fields: seconds are not a tick a run id can name
        ("timezone", "Mars/Olympus"),
        ("catch_up", "all"),
        ("overlap", "queue"),
    ],
)
def test_a_bad_schedule_is_refused_and_nothing_is_stored(
    db_url: str, field: str, value: str
) -> None:
    chosen: dict[str, str] = {"name": "ok", "cron": "0 * * * *", field: value}
    name, cron = chosen.pop("name"), chosen.pop("cron")
    with Runner(db_url) as runner:
        with pytest.raises(ValueError):
            runner.add_schedule(name, AGENT, "task", cron=cron, **chosen)  # type: ignore[arg-type]
        assert runner.schedules() == []


def test_a_tick_starts_one_run_however_often_it_is_fired(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner, queue="ticks")
        assert runner.fire_schedules(tick - timedelta(seconds=1)) == []
        (fired,) = runner.fire_schedules(tick)
        assert fired.run_id == f"hourly-{tick:%Y%m%dT%H%M}" and fired.skipped is None
        assert runner.fire_schedules(tick) == []
        assert runner.fire_schedules(tick + timedelta(seconds=30)) == []
        row = runner.row(fired.run_id)
        assert (row.status, row.queue, row.task) == ("queued", "ticks", "What is 2 + 3?")
        assert [r.id for r in runner.list(schedule="hourly")] == [fired.run_id]
        assert runner.list(schedule="other") == []
        after = runner.schedule("hourly")
        assert (after.last_tick_at, after.last_run_id, after.next_tick_at) == (
            tick,
            fired.run_id,
            tick + HOUR,
        )


def test_threads_firing_one_tick_at_once_start_one_run(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner)
    start = threading.Barrier(6)
    started: list[str] = []
    lock = threading.Lock()

    def firer() -> None:
        with Runner(db_url) as mine:
            start.wait(60)
            for fired in mine.fire_schedules(tick + timedelta(seconds=1)):
                with lock:
                    started.extend([fired.run_id] if fired.run_id else [])

    threads = [threading.Thread(target=firer) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert started == [f"hourly-{tick:%Y%m%dT%H%M}"]
    with Runner(db_url) as runner:
        assert len(runner.list(schedule="hourly")) == 1


def test_catch_up_last_runs_the_last_missed_tick_once(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner, overlap="allow")
        # Nobody looked for five hours: the ticks before the last are missed for good.
        (fired,) = runner.fire_schedules(tick + 4 * HOUR + timedelta(minutes=20))
        assert fired.tick == tick + 4 * HOUR and fired.run_id is not None
        assert runner.fire_schedules(tick + 4 * HOUR + timedelta(minutes=50)) == []
        assert runner.schedule("hourly").next_tick_at == tick + 5 * HOUR
        assert len(runner.list(schedule="hourly")) == 1


def test_catch_up_skip_runs_no_late_tick(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner, catch_up="skip", overlap="allow")
        # Found two minutes late (no worker was up at the tick): skipped.
        (late,) = runner.fire_schedules(tick + timedelta(minutes=2))
        assert (late.run_id, late.skipped) == (None, "late")
        # Several ticks missed: none runs, the next one on time does.
        (missed,) = runner.fire_schedules(tick + 3 * HOUR + timedelta(seconds=10))
        assert (missed.tick, missed.skipped) == (tick + 3 * HOUR, "late")
        (on_time,) = runner.fire_schedules(tick + 4 * HOUR + timedelta(seconds=5))
        assert on_time.run_id == f"hourly-{tick + 4 * HOUR:%Y%m%dT%H%M}"
        assert [r.id for r in runner.list(schedule="hourly")] == [on_time.run_id]


def test_overlap_skip_passes_ticks_while_the_last_run_goes(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner)  # overlap="skip" by default
        (first,) = runner.fire_schedules(tick)
        assert first.run_id is not None
        (second,) = runner.fire_schedules(tick + HOUR)  # the first is still queued
        assert (second.run_id, second.skipped) == (None, "overlap")
        assert runner.schedule("hourly").last_skip == "overlap"
        finish(runner, first.run_id)
        (third,) = runner.fire_schedules(tick + 2 * HOUR)
        assert third.run_id == f"hourly-{tick + 2 * HOUR:%Y%m%dT%H%M}"


def test_overlap_allow_starts_a_run_beside_the_unfinished_one(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner, overlap="allow")
        for n in range(3):
            (fired,) = runner.fire_schedules(tick + n * HOUR)
            assert fired.run_id is not None
        assert len(runner.list(schedule="hourly", status="queued")) == 3  # type: ignore[arg-type]


def test_a_paused_schedule_fires_nothing_and_resumes_from_the_next_tick(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner)
        runner.pause_schedule("hourly")
        assert runner.fire_schedules(tick + 5 * HOUR) == []
        assert runner.store.next_tick() is None  # a worker has nothing to wake up for
        resumed = runner.resume_schedule("hourly")
        assert resumed.next_tick_at > runner.now()  # the ticks of the pause are not caught up
        assert runner.store.next_tick() == resumed.next_tick_at


def test_a_schedule_added_again_never_runs_a_tick_twice(db_url: str) -> None:
    with Runner(db_url) as runner:
        tick = hourly(runner)
        (fired,) = runner.fire_schedules(tick)
        runner.remove_schedule("hourly")
        assert runner.row(fired.run_id or "").status == "queued"  # its runs stay
        hourly(runner)
        (again,) = runner.fire_schedules(tick)  # the same tick, by the new schedule
        assert (again.run_id, again.skipped) == (None, "exists")


def test_stop_reasons_per_schedule(db_url: str) -> None:
    from runner.history import History

    with Runner(db_url) as runner:
        tick = hourly(runner, overlap="allow")
        for n in range(2):
            (fired,) = runner.fire_schedules(tick + n * HOUR)
            assert fired.run_id is not None
            finish(runner, fired.run_id)
        runner.run(AGENT, "not scheduled", id="by-hand")
    with History(db_url) as history:
        groups = history.stats(by="schedule")
    assert [(g.label, g.runs, [(s.stop_reason, s.count) for s in g.shares]) for g in groups] == [
        ("hourly", 2, [("final", 2)])
    ]


def test_a_tick_is_named_in_utc_whatever_the_zone(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.add_schedule(
            "paris", AGENT, "t", cron="30 9 * * *", timezone="Europe/Paris", overlap="allow"
        )
        # 1 July: summer time, 09:30 in Paris is 07:30 UTC; 1 January: 08:30 UTC.
        summer = datetime(2031, 7, 1, 7, 30, tzinfo=UTC)
        winter = datetime(2032, 1, 1, 8, 30, tzinfo=UTC)
        runner.fire_schedules(summer - timedelta(minutes=1))  # catches up once, far ahead
        assert [f.run_id for f in runner.fire_schedules(summer)] == ["paris-20310701T0730"]
        runner.fire_schedules(winter - timedelta(minutes=1))
        assert [f.run_id for f in runner.fire_schedules(winter)] == ["paris-20320101T0830"]


def test_a_request_refused_is_a_usage_error() -> None:
    assert issubclass(ScheduleExists, RequestRefused)
