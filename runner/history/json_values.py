"""Database values as JSON, for export and for the commands' `--json`."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any


def plain(value: Any) -> Any:
    """A database value as JSON: timestamps in ISO 8601, numerics as numbers."""
    if value is None or isinstance(value, bool | int | float | str | list | dict):
        return value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)
