"""When a delayed run may start: `--at TIME` and `--in 10m`, as text a person writes.

A time without a zone is UTC, as everywhere in runner (`--since`, `prune`, every time
shown): a worker on another machine, in another zone, reads the same instant.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from runner.defaults import LONGEST_SECONDS

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`30s`, `10m`, `2h`, `1d` (or `1.5h`); ValueError for anything else."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"not a duration: {text!r} (try 30s, 10m, 2h or 1d)")
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if not seconds <= LONGEST_SECONDS:  # NaN and infinity too
        raise ValueError(
            f"{text.strip()} is too far away: at most {LONGEST_SECONDS / 86400:.0f}d "
            "(about 31 years)"
        )
    return timedelta(seconds=seconds)


def parse_time(text: str) -> datetime:
    """An ISO 8601 time (`2026-12-01T12:00`, `2026-12-01 12:00:00+01:00`), UTC unless it
    says otherwise; ValueError for anything else."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"not an ISO 8601 time: {text!r} (try 2026-12-01T12:00, UTC unless it has an offset)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def delay_of(value: object) -> timedelta:
    """A delay given to the Python API: seconds (a number) or a timedelta, not negative."""
    if isinstance(value, timedelta):
        delay = value
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        delay = timedelta(seconds=value)
    else:
        raise ValueError(f"delay must be seconds or a timedelta, not {value!r}")
    if delay < timedelta(0):
        raise ValueError(f"delay must not be negative, got {value!r}")
    return delay


def start_time(now: datetime, not_before: object = None, delay: object = None) -> datetime | None:
    """When a run may first be claimed: `not_before` (an aware datetime), or `now` plus
    `delay`, or None (at once). Both given is a ValueError."""
    if not_before is not None and delay is not None:
        raise ValueError("give not_before or delay, not both")
    if delay is not None:
        return now + delay_of(delay)
    if not_before is None:
        return None
    if not isinstance(not_before, datetime):
        raise ValueError(f"not_before must be a datetime, not {not_before!r}")
    if not_before.tzinfo is None:
        raise ValueError(f"not_before must have a time zone (say UTC): {not_before!r}")
    return not_before.astimezone(UTC)
