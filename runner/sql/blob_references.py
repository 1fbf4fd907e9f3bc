"""Which blobs the rows name: every payload column read where it holds an envelope."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, Text, cast, select

from runner.sql.schema import entries, messages, runs, schedules, scores
from runner.store.blob_sweep import named_blobs

# Every column a payload is kept in (runner.store.payloads): what a sweep and a key
# rotation read. `args` is JSON: its envelope is a JSON string, read as text.
PAYLOAD_COLUMNS = (
    (runs, "task"),
    (runs, "output"),
    (entries, "content"),
    (entries, "args"),
    (messages, "body"),
    (schedules, "task"),
    (scores, "note"),
)
# Every envelope holds this, escaped or not: rows without it are passed over by the scan.
_MARK = "%runner.payload%"


def named_in(engine: Engine | Connection) -> set[tuple[str, str]]:
    """The (store URL, sha256) of every blob some row names."""
    connection = engine.connect() if isinstance(engine, Engine) else engine
    try:
        named: set[tuple[str, str]] = set()
        for table, name in PAYLOAD_COLUMNS:
            column = table.c[name]
            text = cast(column, Text) if name == "args" else column
            found = connection.execute(select(column).where(text.like(_MARK)))
            named |= named_blobs(value for (value,) in found)
        return named
    finally:
        if connection is not engine:
            connection.close()
