"""Runs changed outside the step loop: new budgets (a revival, an extension) and forks.

The decisions are the service's (runner.service.revival, runner.service.fork); here is only
their SQL, each one transaction: a budget change is an entry after the run's last and the
run's new values, written on its locked row; a fork is a new run and a copy of its parent's
first entries (one INSERT ... SELECT), whole or absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Engine, insert, literal, select, update
from sqlalchemy.exc import IntegrityError

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.journal import Entry
from runner.errors import RunNotFound
from runner.sql.payloads import payloads_of
from runner.sql.runs import RunRow, entry_of, lock_run
from runner.sql.schema import entries, runs
from runner.store.protocol import Decide
from runner.store.rows import FORKED_EPOCH, entry_row, seal_task


def change_budgets(engine: Engine, run_id: str, decide: Decide, clock: Clock = SYSTEM) -> RunRow:
    """`decide` on the locked run and its last two entries, then write what it gave."""
    at = utc_now(clock)
    with engine.begin() as connection:
        row = lock_run(connection, run_id)
        if row is None:
            raise RunNotFound(f"no run with id {run_id}")
        run = RunRow.of(row)
        tail = [
            (found.seq, entry_of(found))
            for found in connection.execute(
                select(entries)
                .where(entries.c.run_id == run.id)
                .order_by(entries.c.seq.desc())
                .limit(2)
            )
        ]
        change = decide(run, tail, at)
        if change is None:
            return run
        seq = tail[0][0] + 1 if tail else 0
        # Under the run's epoch: a revival's (nobody holds a finished run) or the claim's
        # that extends it (decide checked it is still the run's).
        values = entry_row(run.id, seq, run.lease_epoch, change.entry, at, payloads_of(connection))
        connection.execute(insert(entries).values(**values))
        connection.execute(
            update(runs).where(runs.c.id == run.id).values(**change.values, updated_at=at)
        )
        return RunRow.of(connection.execute(select(runs).where(runs.c.id == run.id)).one())


def insert_fork(
    engine: Engine,
    row: Mapping[str, Any],
    parent_id: str,
    copied: int,
    extra: Entry | None,
    clock: Clock = SYSTEM,
) -> bool:
    """The fork's run and its copy of the parent's first `copied` entries (their run id
    replaced and their epoch FORKED_EPOCH, the rest byte for byte), then `extra`."""
    at = utc_now(clock)
    run_id = row["id"]
    columns = [column.name for column in entries.columns]
    replaced: dict[str, ColumnElement[Any]] = {
        "run_id": literal(run_id),
        "lease_epoch": literal(FORKED_EPOCH),
    }
    source = select(
        *(replaced[name].label(name) if name in replaced else entries.c[name] for name in columns)
    ).where(entries.c.run_id == parent_id, entries.c.seq < copied)
    try:
        with engine.begin() as connection:
            connection.execute(insert(runs).values(**seal_task(row, payloads_of(connection))))
            connection.execute(insert(entries).from_select(columns, source))
            if extra is not None:
                values = entry_row(run_id, copied, FORKED_EPOCH, extra, at, payloads_of(connection))
                connection.execute(insert(entries).values(**values))
    except IntegrityError:
        return False
    return True
