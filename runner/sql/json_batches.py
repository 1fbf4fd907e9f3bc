"""Many rows bound as ONE JSON parameter, for PostgreSQL's statements that expand it
server-side (json_to_recordset): a group commit's entries (`fencing.write_together`), a
batch claim's tasks (`leases`).

One JSON text for a whole batch (json.dumps is C): the driver adapting an array per column
did it element by element in Python, 8% of a worker's CPU at a thousand runs in flight
(docs/performance/workers.md, A thousand runs in one worker). Each value is converted first as the
driver would bind it alone (its column's bind processor; a JSON column's value as the text
the driver would send), so a row written from the batch is byte for byte a row written by
its own INSERT.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import JSON, Table
from sqlalchemy.engine import Dialect

from runner.sql.backend import backend_for
from runner.sql.schema import entries
from runner.store.rows import ENTRY_COLUMNS

Processors = tuple[tuple[str, Callable[[Any], Any], bool], ...]
_PROCESSORS: WeakKeyDictionary[Dialect, dict[tuple[str, tuple[str, ...]], Processors]] = (
    WeakKeyDictionary()
)


def processors(dialect: Dialect, table: Table = entries, names: tuple[str, ...] = ()) -> Processors:
    """The columns of `table` (`names`, or all of them) whose values the driver takes
    converted (a JSON value wrapped, a timestamp to UTC, a boolean checked), how, and
    whether the column is JSON."""
    by_columns = _PROCESSORS.get(dialect)
    if by_columns is None:
        by_columns = _PROCESSORS[dialect] = {}
    found = by_columns.get((table.name, names))
    if found is None:
        found_here = []
        for column in table.columns:
            if names and column.name not in names:
                continue
            process = column.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                json_column = isinstance(column.type, JSON)
                found_here.append((column.name, process, json_column))
        found = by_columns[(table.name, names)] = tuple(found_here)
    return found


def converter(
    dialect: Dialect, dbapi_connection: Any, table: Table = entries, names: tuple[str, ...] = ()
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What converts a row of `table` (its values by column name, `names` or all columns)
    in place for a batch, on `dbapi_connection`'s driver; it returns the row."""
    found = processors(dialect, table, names)
    as_text = backend_for(dialect.name).json_text(dbapi_connection)

    def convert(values: dict[str, Any]) -> dict[str, Any]:
        for name, process, json_column in found:
            value = process(values[name])
            values[name] = as_text(value) if json_column else value
        return values

    return convert


def entry_rows(
    dialect: Dialect, dbapi_connection: Any, rows: Sequence[tuple[Any, ...]]
) -> list[dict[str, Any]]:
    """Entries' rows (`store.rows.entry_values`, in ENTRY_COLUMNS' order), converted."""
    convert = converter(dialect, dbapi_connection)
    return [convert(dict(zip(ENTRY_COLUMNS, row, strict=True))) for row in rows]


def text(rows: Sequence[dict[str, Any]]) -> str:
    """The batch's parameter: converted rows as one JSON text."""
    return json.dumps(rows, default=_iso)


def _iso(value: Any) -> str:
    """A timestamp in the batch's JSON (aware, in UTC: its column's processor made it so)."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
