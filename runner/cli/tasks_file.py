"""`runner submit AGENT --from tasks.jsonl`: one JSON object per line, read into the items
of `Runner.submit_many`, each remembered by its line number for the errors.

A line holds `task` and optionally `id`, `budgets` (an object of budget names), `queue`,
`priority`, `at` (an ISO 8601 time, UTC unless it says otherwise) and `in` (`10m`, or
seconds). The command's own flags are the defaults of every line. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from runner.service.delays import parse_duration, parse_time

LINE_KEYS = ("task", "id", "budgets", "queue", "priority", "at", "in")


class BadLine(ValueError):
    """A line that is not a task: `line` is its number (1 for the first line)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line


def read_items(
    lines: Iterable[str],
    *,
    queue: str | None,
    priority: int | None,
    start_at: datetime | None,
    start_in: timedelta | None,
    budgets: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], list[int]]:
    """The items of the lines, with the flags as defaults, and each item's line number."""
    items: list[dict[str, Any]] = []
    numbers: list[int] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadLine(number, f"not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(value, dict):
            raise BadLine(number, f"not a JSON object but {type(value).__name__}")
        unknown = sorted(key for key in value if key not in LINE_KEYS)
        if unknown:
            raise BadLine(
                number, f"unknown field {', '.join(unknown)}; known: {', '.join(LINE_KEYS)}"
            )
        item = {key: value[key] for key in ("task", "id", "queue", "priority") if key in value}
        item.setdefault("queue", queue)
        item.setdefault("priority", priority)
        line_budgets = value.get("budgets", {})
        if not isinstance(line_budgets, dict):
            raise BadLine(number, "budgets must be a JSON object of budget names")
        item["budgets"] = {**budgets, **line_budgets}
        try:
            item.update(_start(value, start_at, start_in))
        except ValueError as exc:
            raise BadLine(number, str(exc)) from None
        items.append({key: given for key, given in item.items() if given is not None})
        numbers.append(number)
    return items, numbers


def _start(
    value: Mapping[str, Any], start_at: datetime | None, start_in: timedelta | None
) -> dict[str, Any]:
    """The item's not_before or delay: the line's `at` or `in`, else the flags'."""
    if "at" in value and "in" in value:
        raise ValueError("give at or in, not both")
    if "at" in value:
        if not isinstance(value["at"], str):
            raise ValueError(f"at must be an ISO 8601 time as a string, not {value['at']!r}")
        return {"not_before": parse_time(value["at"])}
    if "in" in value:
        given = value["in"]
        if isinstance(given, str):
            return {"delay": parse_duration(given)}
        if isinstance(given, int | float) and not isinstance(given, bool):
            return {"delay": given}  # seconds
        raise ValueError(f"in must be a duration such as 10m, or seconds, not {given!r}")
    return {"not_before": start_at, "delay": start_in}
