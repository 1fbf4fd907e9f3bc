"""A run inserted already claimed, its task journaled, in one commit (`Runner.run`).

A run that this process runs at once is never queued, so nobody can have held it: its claim
is known before it is written (epoch 1, nothing resumed, no deadline passed), and so is its
row. It goes in as claimed, with its task as entry 0, in one transaction of two plain
INSERTs on the driver's own cursor (runner.sql.driver), and the claim is made of the values
written, nothing read back. That was an INSERT ... RETURNING and a claim's UPDATE ...
RETURNING through SQLAlchemy's execute, then the task's own commit from the run's loop:
most of what a run costs beyond its steps (docs/performance/step.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.counters import Counters
from runner.core.faults import fault
from runner.core.journal import Entry, EntryKind
from runner.sql import driver, leases
from runner.sql.driver import Prepared, prepared
from runner.sql.payloads import payloads_of
from runner.sql.runs import INSERT_RUN_RETURNING, RunRow, prepared_entry_insert
from runner.sql.schema import runs
from runner.store.rows import entry_row, seal_task
from runner.store.rules import Claim

# What a fresh run's row holds in the columns `new_run` leaves to their defaults.
_UNSET: dict[str, Any] = {column.name: None for column in runs.c} | {"undelivered_messages": 0}


def create_claimed(
    engine: Engine,
    row: Mapping[str, Any],
    *,
    owner: str,
    lease_seconds: float,
    max_resumes: int,
    clock: Clock = SYSTEM,
) -> Claim | None:
    """Insert a run (a row of `new_run`) claimed by `owner`, with its task journaled, in ONE
    transaction. None, nothing written, when its id exists."""
    if max_resumes < 0:  # a crash loop from its first claim: as a claim decides it
        return _inserted_then_taken(engine, row, owner, lease_seconds, max_resumes, clock)
    at = utc_now(clock)
    payloads = payloads_of(engine)
    values = claimed(seal_task(row, payloads), owner, lease_seconds, at)
    epoch = values["lease_epoch"]
    run = RunRow.of(_UNSET | values)
    task = Entry(EntryKind.TASK, 0, Counters(), content=run.task)
    task_row = entry_row(values["id"], 0, epoch, task, at, payloads)
    dialect = engine.dialect
    run_insert = _insert_run(dialect, tuple(values))
    task_insert = prepared_entry_insert(dialect)
    try:
        with engine.connect() as connection, driver.Write(connection) as write:
            write.execute(run_insert.sql, run_insert.parameters(dict(values)))
            write.execute(task_insert.sql, task_insert.parameters(task_row))
    except IntegrityError:
        return None
    fault("after_run_start")
    # Its progress counted before its task (0), as a batch's claim counts a fresh run's.
    return Claim(run, epoch, 1, crash_loop=False, stalled=0, task=task)


def _inserted_then_taken(
    engine: Engine,
    row: Mapping[str, Any],
    owner: str,
    lease_seconds: float,
    max_resumes: int,
    clock: Clock,
) -> Claim | None:
    """The run inserted, then taken by a claim's own statement (`leases.take`), in one
    transaction: for a claim whose outcome is not a fresh run's (a crash loop at once)."""
    try:
        with engine.begin() as connection:
            sealed = seal_task(row, payloads_of(engine))
            inserted = connection.execute(INSERT_RUN_RETURNING, sealed).one()
            return leases.take(
                connection, inserted, owner, lease_seconds, max_resumes, utc_now(clock)
            )
    except IntegrityError:
        return None


def claimed(
    row: Mapping[str, Any], owner: str, lease_seconds: float, at: datetime
) -> dict[str, Any]:
    """A fresh run's row as the claim that takes it leaves it (`leases.take`: a run nobody
    held, its journal empty)."""
    return {
        **row,
        **leases.leased(row, owner, lease_seconds, at),
        "resumes": 0,
        "stalled_resumes": 0,
        "progress_seq": 0,
    }


def _insert_run(dialect: Dialect, columns: tuple[str, ...]) -> Prepared:
    def build() -> Any:
        return insert(runs).values({name: bindparam(name) for name in columns})

    return prepared(dialect, ("insert_run", columns), build)
