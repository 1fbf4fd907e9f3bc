"""A schedule's rules, the same in every store: what its name, cron, timezone and choices
may be, when its ticks come (read in its timezone, through cronsim), and the id of a tick's
run. None of it reads a database: the SQL store keeps and fires schedules in runner.sql's
`schedules`, through the store's protocol."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

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
