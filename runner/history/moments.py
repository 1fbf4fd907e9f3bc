"""Moments in the history: a date, a UTC time, or an age before now (`--since`, `prune`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_moment(text: str, *, now: datetime | None = None) -> datetime:
    """A point in time, in UTC: `2026-11-01`, `2026-11-01T12:00` (UTC unless it says
    otherwise), or an age before now such as `90d`, `12h`, `30m`, `2w`."""
    text = text.strip()
    age = _AGE.fullmatch(text)
    if age:
        delta = timedelta(**{_UNITS[age.group(2)]: float(age.group(1))})
        return (now or datetime.now(UTC)) - delta
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"not a date, a time or an age: {text!r} (try 2026-11-01, 2026-11-01T12:00, 7d)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
