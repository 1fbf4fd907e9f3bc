"""How the templates write values: times in UTC, durations, amounts, journal content."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def amount(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


# A value longer than this is cut on the page (a tool may return 200 MB): the page stays a
# page, and `runner show ID --full` or `runner export --run ID` (shown on it) give it whole.
SHOWN_LIMIT = 64 * 1024


def shown(value: Any) -> str:
    """Journal content as text: strings as they are, anything else as indented JSON, cut at
    SHOWN_LIMIT characters. The template escapes it; nothing here is ever marked safe."""
    if isinstance(value, str):
        text = value
    elif value is None:
        return ""
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) <= SHOWN_LIMIT:
        return text
    more = len(text) - SHOWN_LIMIT
    return (
        f"{text[:SHOWN_LIMIT]}\n[... {more:,} more characters cut here: "
        "`runner show ID --full` or `runner export --run ID` gives the whole value]"
    )


def state(run: Any) -> str:
    """The run's status, or `stalled` for a running run nobody holds any more: the `state`
    its read judged at the database's clock (runner.history), never this host's clock."""
    return str(getattr(run, "state", "") or run.status)


FILTERS: dict[str, Callable[..., str]] = {
    "when": when,
    "state": state,
    "seconds": seconds,
    "amount": amount,
    "shown": shown,
}
