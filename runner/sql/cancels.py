"""Cancels that land: a cancelled run that no live worker holds is finished `cancelled`
without a step being run, since nobody would reach its next step to stop before it.

The cancel itself finishes a queued or waiting run, or one whose lease has lapsed
(`request_cancel`). A run whose worker died holding it under a lease still live is finished
when that lease lapses, by whichever live worker looks next (`finish_lapsed`: every worker
looks about once a second, whatever its queues and free slots), not when a worker with a
free slot in its queue takes it over. Either way the run moves to a new epoch, fencing out
a holder that only seemed dead, and one that never started journals its task first: its
journal says what was cancelled (a child cancelled before its first step had none).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, insert, select, update

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.errors import RunNotFound
from runner.sql import reads
from runner.sql.payloads import payloads_of
from runner.sql.runs import RunRow, lock_run, plain, stopped_values
from runner.sql.schema import entries, runs
from runner.store.rows import entry_row

# Most lapsed cancels one look finishes (each in a transaction of its own); more wait a second.
LAPSED_PER_LOOK = 100


def request_cancel(engine: Engine, run_id: str, clock: Clock = SYSTEM) -> RunRow:
    """Ask a run to stop: at its next step while a live worker holds it, else at once (a
    queued or waiting run, or one whose worker died)."""
    at = utc_now(clock)
    with engine.begin() as connection:
        row = lock_run(connection, run_id)
        if row is None:
            raise RunNotFound(f"no run with id {run_id}")
        run = RunRow.of(row)
        if run.status is RunStatus.FINISHED:
            return run
        values: dict[str, Any] = {"cancel_requested": True, "updated_at": at}
        if not run.lease_is_live(at):
            # A waiting run too: it holds no lease, and an answer that comes later finds it
            # finished and is refused.
            values.update(_finished(connection, run, at))
        connection.execute(update(runs).where(runs.c.id == run.id).values(**values))
        return RunRow.of(connection.execute(select(runs).where(runs.c.id == run.id)).one())


def finish_lapsed(engine: Engine, clock: Clock = SYSTEM) -> list[RunRow]:
    """Finish `cancelled` the runs asked to cancel whose lease has lapsed (their worker died
    holding them); the runs finished."""
    at = utc_now(clock)
    with engine.connect() as connection:
        # ix_runs_status_lease: the running runs whose lease lapsed, a few at any time.
        found = connection.execute(
            select(runs.c.id)
            .where(
                runs.c.status == RunStatus.RUNNING,
                runs.c.lease_expires_at < at,
                runs.c.cancel_requested.is_(True),
            )
            .order_by(runs.c.lease_expires_at)
            .limit(LAPSED_PER_LOOK)
        ).scalars()
        run_ids = list(found)
    finished: list[RunRow] = []
    for run_id in run_ids:
        with engine.begin() as connection:
            row = lock_run(connection, run_id)
            if row is None:
                continue
            run = RunRow.of(row)
            at = utc_now(clock)  # under the lock: a renewal that won the race keeps it
            if run.status is not RunStatus.RUNNING or run.lease_is_live(at):
                continue
            connection.execute(
                update(runs)
                .where(runs.c.id == run.id)
                .values(updated_at=at, **_finished(connection, run, at))
            )
            finished.append(
                RunRow.of(connection.execute(select(runs).where(runs.c.id == run.id)).one())
            )
    return finished


def _finished(connection: Connection, run: RunRow, at: datetime) -> dict[str, Any]:
    """The values that finish `run`, which nobody executes, `cancelled`, under a new epoch;
    its task journaled first if it never started."""
    epoch = run.lease_epoch + 1
    with plain(connection) as reader:
        started = reads.last_entry(reader, run.id) is not None
    if not started:
        task = Entry(EntryKind.TASK, 0, Counters(), content=run.task)
        connection.execute(
            insert(entries).values(entry_row(run.id, 0, epoch, task, at, payloads_of(connection)))
        )
    return {
        **stopped_values(connection, run.id, StopReason.CANCELLED, at),
        "lease_owner": None,
        "lease_expires_at": None,
        "lease_epoch": epoch,
        "waiting_since": None,
        "wait_expires_at": None,
    }
