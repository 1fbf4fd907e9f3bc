"""A schedule's rules, the same in every store: what its name, cron, timezone and choices
may be, when its ticks come (read in its timezone, through cronsim), the id of a tick's
run, and what a due tick comes to (`handle_due`: a run started, or a skip and why). None of
it reads a database: the SQL store keeps and fires schedules in runner.sql's `schedules`,
the in-memory store in runner.testing's `memory_schedules`, both through these rules.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.sql.schedules`, `runner.testing.memory_schedules`, `runner.service.scheduling`,
`runner.service.housekeeping` (where a worker fires the ticks due), `runner.cli.schedules`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from runner.store.rows import ScheduleRow, new_run

# A tick found due later than this after its time was missed: no worker was up at the tick.
ON_TIME_SECONDS = 60.0

# A name short enough that NAME-YYYYMMDDTHHMM fits a run id (32 characters).
SCHEDULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,17}")


CATCH_UP = ("last", "skip")


OVERLAP = ("skip", "allow")


CatchUp = Literal["last", "skip"]


Overlap = Literal["skip", "allow"]


def check_schedule_name(name: object) -> str:
    if not isinstance(name, str) or not SCHEDULE_NAME.fullmatch(name):
        raise ValueError(
            f"schedule name {name!r} must be 1 to 18 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_cron(expression: object) -> str:
    """The expression, or ValueError: five fields (minute hour day month weekday)."""
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise ValueError(
            f"cron {expression!r} must have five fields: minute hour day-of-month month "
            'day-of-week (as "0 * * * *")'
        )
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ValueError(f"cron {expression!r}: {exc}") from None
    return " ".join(expression.split())


def check_timezone(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"time zone {name!r} must be an IANA name such as Europe/Paris")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (an IANA name such as Europe/Paris)"
        ) from None
    return name


def check_choice(kind: str, value: object, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{kind} must be one of {', '.join(choices)}, not {value!r}")
    return str(value)


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick strictly after `after`, in UTC."""
    local = after.astimezone(ZoneInfo(timezone))
    return next(CronSim(cron, local)).astimezone(UTC)


def last_tick(cron: str, timezone: str, at: datetime) -> datetime:
    """The latest tick at or before `at`, in UTC."""
    # Reversed, cronsim gives a time with microseconds its own whole second first if it
    # is a tick, then earlier ones: the end of `at`'s second is never past `at`'s tick.
    local = at.astimezone(ZoneInfo(timezone)).replace(microsecond=999_999)
    return next(CronSim(cron, local, reverse=True)).astimezone(UTC)


def tick_run_id(name: str, tick: datetime) -> str:
    """The id of the run of `name`'s tick: the same in every worker, so a run per tick."""
    return f"{name}-{tick.astimezone(UTC):%Y%m%dT%H%M}"


@dataclass(frozen=True)
class Handled:
    """What one due tick of a schedule comes to: the run to start (`run_id`), or a skip
    and why (`skipped`: `late`, `overlap`, or `exists` when a run of that id is there
    already, from a schedule of the same name removed and added again)."""

    tick: datetime
    run_id: str | None
    skipped: str | None
    next_tick_at: datetime


def handle_due(
    schedule: ScheduleRow,
    now: datetime,
    *,
    still_going: Callable[[str], bool],
    exists: Callable[[str], bool],
) -> Handled:
    """Decide a due tick of `schedule` at `now`, by its `catch_up` and `overlap`.

    A late tick is one found due after a later tick came due too, or more than
    ON_TIME_SECONDS after its time: `catch_up="last"` runs the latest tick due once (the
    missed ones before it are skipped), `skip` runs none and waits for the next tick.
    `overlap="skip"` skips a tick that comes while the previous tick's run (`still_going`
    says of a run id) is unfinished. The store asks, inside the transaction that then acts
    on the answer, whether a run is unfinished and whether one exists.
    """
    tick = last_tick(schedule.cron, schedule.timezone, now)
    late = tick > schedule.next_tick_at or (now - tick).total_seconds() > ON_TIME_SECONDS
    tick_id = tick_run_id(schedule.name, tick)
    skipped: str | None = None
    if late and schedule.catch_up == "skip":
        skipped = "late"
    elif (
        schedule.overlap == "skip"
        and schedule.last_run_id is not None
        and still_going(schedule.last_run_id)
    ):
        skipped = "overlap"
    elif exists(tick_id):
        skipped = "exists"
    run_id = None if skipped is not None else tick_id
    return Handled(tick, run_id, skipped, next_tick(schedule.cron, schedule.timezone, now))


def tick_run(schedule: ScheduleRow, run_id: str, at: datetime) -> dict[str, Any]:
    """The row of the run a schedule's tick starts (queued at `at`, naming its schedule)."""
    row = new_run(
        run_id=run_id,
        agent=schedule.agent,
        agent_name=schedule.agent_name,
        release=schedule.release,
        task=schedule.task,
        budgets=schedule.budgets,
        at=at,
        queue=schedule.queue,
        priority=schedule.priority,
    )
    return {**row, "schedule": schedule.name}


def after_tick(schedule: ScheduleRow, handled: Handled, at: datetime) -> dict[str, Any]:
    """The schedule's columns once `handled` is done (`at`: when, on the store's clock)."""
    return {
        "next_tick_at": handled.next_tick_at,
        "last_tick_at": handled.tick,
        "last_run_id": handled.run_id if handled.run_id is not None else schedule.last_run_id,
        "last_skip": handled.skipped,
        "updated_at": at,
    }
