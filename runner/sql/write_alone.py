"""A journal write of one entry alone, in the fewest steps the writer has for it.

A write with no stop, park, tree charge or limit ride, when no other write of the process
is queued or being written and nothing listens to the connection's statements, skips
`fencing.Append` and the group commit: on SQLite its quiet fenced insert, committed only if
it wrote the row; on PostgreSQL its fenced insert in autocommit, read back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.engine import Dialect

from runner.core.journal import Entry
from runner.errors import LeaseLost
from runner.sql.backend import backend_for
from runner.sql.fenced_inserts import (
    NOTHING_HEARD,
    Heard,
    fence_values,
    fenced_insert,
    insert_values,
    positional_insert,
)
from runner.store.payloads import Payloads
from runner.store.rows import entry_values

Made = Callable[[], tuple[str, Any]]  # a statement's SQL and values, made when called


class AloneWriter(Protocol):
    """What `write_alone` asks of the journal's writer (runner.sql.writer.Writer)."""

    @property
    def reads_alone(self) -> bool: ...

    def commit_alone(self, made: Made, rows: int) -> bool: ...

    def read_alone(self, made: Made) -> Sequence[Any] | None: ...


def quiet_one(
    dialect: Dialect,
    run_id: str,
    epoch: int,
    seq: int,
    entry: Entry,
    at: datetime,
    payloads: Payloads,
) -> Made | None:
    """One entry's quiet fenced insert, where the dialect has one (SQLite): what makes its
    SQL and values when called, the statement `Append.of` makes first for a write of this
    entry alone, which writes its row if the run is this worker's and nothing waits to be
    heard (no cancel, no message), and else changes nothing. None where the dialect has
    none."""
    positional = positional_insert(dialect)
    if positional is None or positional.quiet is None:
        return None
    found, quiet = positional, positional.quiet

    def made() -> tuple[str, Any]:
        row = entry_values(run_id, seq, epoch, entry, at, payloads)
        fence = {"fence_run": run_id, "fence_epoch": epoch}
        return quiet[0], found.parameters(row, fence)[: quiet[1]]

    return made


def write_alone(
    writer: AloneWriter,
    dialect: Dialect,
    run_id: str,
    epoch: int,
    seq: int,
    entry: Entry,
    at: datetime,
    lease_seconds: float,
    payloads: Payloads,
) -> Heard | None:
    """One entry's write, alone, in the fewest steps the writer has for it: what the run
    heard, or None if the writer did not take it (another write queued or being written,
    the file or every connection busy, statements watched; on SQLite, a run that has heard
    something), to go through `Append.of` and `Writer.commit` as any write. LeaseLost if it
    was fenced out. The statement is made only once the writer takes it: at saturation,
    where most writes share a group's, none is made twice.

    On SQLite its quiet insert (`quiet_one`), committed only if it wrote the row; on
    PostgreSQL its fenced insert in autocommit, one round trip, read back."""
    if positional_insert(dialect) is not None:
        quiet = quiet_one(dialect, run_id, epoch, seq, entry, at, payloads)
        if quiet is None:
            return None
        return NOTHING_HEARD if writer.commit_alone(quiet, rows=1) else None
    if not writer.reads_alone:
        return None

    def loud() -> tuple[str, Any]:
        statement = fenced_insert(dialect, 1)
        fence = fence_values(backend_for(dialect.name), run_id, epoch, at, lease_seconds)
        values = insert_values((entry_values(run_id, seq, epoch, entry, at, payloads),), fence)
        return statement.sql, statement.parameters(values)

    found = writer.read_alone(loud)
    if found is None:
        return None
    if not found:
        raise LeaseLost(f"run {run_id} was taken over by another worker: not writing")
    return Heard(bool(found[0][1]), found[0][2])
