"""The `deltas` table: pieces of model responses in flight, written and read in SQL.

Deltas are not the journal. A worker writes a batch of them in one short transaction of its
own (`write`), apart from the journal's fenced writes: a follower's latency is never bought
with a step's. A batch is a list of changes in order: `Put` a delta, or `Drop` a run's
deltas of some steps (the call's action was journaled, the call began afresh, or the run
was taken up again after a crash). `sweep` deletes what a crash left behind once it is
DELTA_KEEP_SECONDS old.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, delete, select

from runner.core.deltas import Delta
from runner.sql.payloads import payloads_of
from runner.sql.schema import deltas
from runner.sql.writer import writing
from runner.store.delta_writer import DELTA_KEEP_SECONDS, Change, Put
from runner.store.payloads import Payloads, open_text


def write(engine: Engine, changes: list[Change]) -> None:
    """Apply `changes` in order, in one transaction (SQLite: this process's turn to write)."""
    if not changes:
        return
    payloads = payloads_of(engine)  # a piece of a model's output is a payload too
    with writing(engine), engine.begin() as connection:
        rows: list[dict[str, Any]] = []
        for change in changes:
            if isinstance(change, Put):
                rows.append(_row(change, payloads))
                continue
            if rows:
                connection.execute(deltas.insert(), rows)
                rows = []
            connection.execute(
                delete(deltas).where(
                    and_(
                        deltas.c.run_id == change.run_id,
                        deltas.c.step >= change.first,
                        deltas.c.step <= change.last,
                    )
                )
            )
        if rows:
            connection.execute(deltas.insert(), rows)


def _row(put: Put, payloads: Payloads) -> dict[str, Any]:
    delta = put.delta
    return {
        "run_id": put.run_id,
        "step": delta.step,
        "ordinal": delta.ordinal,
        "part": delta.part,
        "call_index": delta.call,
        "tool": delta.tool,
        "text": payloads.seal(delta.text),
        "created_at": put.at,
    }


def deltas_after(engine: Engine, run_id: str, after: int, limit: int) -> list[tuple[int, Delta]]:
    """At most `limit` of the run's deltas with an id above `after`, in order, each with its
    id: a range of the index (run_id, id), so a follower of a run with none costs one probe."""
    query = (
        select(
            deltas.c.id,
            deltas.c.step,
            deltas.c.ordinal,
            deltas.c.text,
            deltas.c.part,
            deltas.c.call_index,
            deltas.c.tool,
        )
        .where(deltas.c.run_id == run_id, deltas.c.id > after)
        .order_by(deltas.c.id)
        .limit(limit)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        (
            row.id,
            Delta(
                row.step, row.ordinal, open_text(row.text) or "", row.part, row.call_index, row.tool
            ),
        )
        for row in rows
    ]


def sweep(engine: Engine, now: datetime, keep_seconds: float = DELTA_KEEP_SECONDS) -> int:
    """Delete every delta written more than `keep_seconds` before `now`; how many went."""
    before = now - timedelta(seconds=keep_seconds)
    with writing(engine), engine.begin() as connection:
        return connection.execute(delete(deltas).where(deltas.c.created_at < before)).rowcount
