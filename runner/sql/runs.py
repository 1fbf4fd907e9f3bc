"""Runs as stored: their values, and the short named queries that create, find, list and
cancel them. Every read of runs and journals is written once as plain SQL in
runner.sql.reads (which `runner list` and `show` run without SQLAlchemy); the functions
here run it on the driver connection beneath one of the engine's (`plain_reading`).
Claims and leases are in runner.sql.leases, the journal's fenced writes in
runner.sql.fencing, opening and migrating the database in runner.sql.database, the
reads, export and prune of the run history in the runner.history package; what differs
between SQLite and PostgreSQL is in runner.sql.backend (and, for `runner sql`'s
read-only connections, in runner.history.sqlite_reader and postgres_reader, behind one
interface). All of runner's SQL is in these modules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Insert,
    Row,
    Table,
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.sql import reads
from runner.sql.backend import backend_for
from runner.sql.driver import Prepared, prepared
from runner.sql.payloads import payloads_of
from runner.sql.reads import plain as plain  # re-exported: the store's modules read so
from runner.sql.reads import plain_reading as plain_reading
from runner.sql.schema import DEFAULT_QUEUE, entries, runs
from runner.store.rows import ENTRY_COLUMNS, new_run, seal_task
from runner.store.rows import RunRow as RunRow  # re-exported: rows are built without SQLAlchemy
from runner.store.rows import decode as decode
from runner.store.rows import entry_of as entry_of

# -- values in and out ----------------------------------------------------------------------


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A connection for reads only (on SQLite one that never waits for the write lock)."""
    with engine.connect() as connection:
        yield connection.execution_options(**backend_for(engine.dialect.name).read_options())


def store_named(
    engine: Engine, table: Table, name: str, values: Mapping[str, Any], what: str
) -> None:
    """Set `values` on `table`'s row named `name`, made if there is none (a queue's
    settings, a provider limit); `what` names it in the error if that keeps failing."""
    for _attempt in range(3):
        try:
            with engine.begin() as connection:
                changed = connection.execute(
                    update(table).where(table.c.name == name).values(**values)
                ).rowcount
                if not changed:
                    connection.execute(table.insert().values(name=name, **values))
            return
        except IntegrityError:
            continue  # another process made the row meanwhile: update it this time
    raise RuntimeError(f"could not store {what}")  # pragma: no cover


# -- creating and finding runs --------------------------------------------------------------


def create_run(
    engine: Engine,
    *,
    run_id: str,
    agent: str | None,
    agent_name: str | None,
    release: str | None,
    task: str,
    budgets: dict[str, Any],
    clock: Clock = SYSTEM,
    wake: bool = True,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    not_before: datetime | None = None,
) -> bool:
    """Insert a queued run; False (and nothing written) when the id exists already.

    `wake` tells idle workers at once (PostgreSQL NOTIFY): not for a run this process is
    about to execute itself (`runner run`), which a woken worker would only race it for.
    """
    values = new_run(
        run_id=run_id,
        agent=agent,
        agent_name=agent_name,
        release=release,
        task=task,
        budgets=budgets,
        at=utc_now(clock),
        queue=queue,
        priority=priority,
        not_before=not_before,
    )
    return insert_run(engine, values, wake=wake)


# A run's INSERT, its values bound (a row of `new_run`): built once, where `.values(**row)`
# coerced every value and hashed them into the cache key, each time (about 0.9 ms a run).
INSERT_RUN = insert(runs)
INSERT_RUN_RETURNING = insert(runs).returning(*runs.c)


def entry_insert() -> Insert:
    """The INSERT of one entry's row, every column bound by its name (no fence: for a
    transaction that holds its run's row already)."""
    return insert(entries).values(
        {entries.c[name]: bindparam(name, type_=entries.c[name].type) for name in ENTRY_COLUMNS}
    )


def prepared_entry_insert(dialect: Dialect) -> Prepared:
    """`entry_insert`, rendered once for `dialect` (runner.sql.driver)."""
    return prepared(dialect, "entry_insert", entry_insert)


def insert_run(engine: Engine, row: Mapping[str, Any], *, wake: bool = True) -> bool:
    """Insert a run (a row of `new_run`); False (and nothing written) when the id exists."""
    try:
        with engine.begin() as connection:
            connection.execute(INSERT_RUN, seal_task(row, payloads_of(engine)))
            if wake:  # delivered when the insert commits, never before
                backend_for(engine.dialect.name).wake_workers(connection)
    except IntegrityError:
        return False
    return True


def insert_runs(engine: Engine, rows: Sequence[Mapping[str, Any]], *, wake: bool = True) -> None:
    """Insert queued runs (rows of `new_run`) in ONE transaction: all of them, or none
    (IntegrityError when an id exists). SQLAlchemy sends them as multi-row INSERTs."""
    if not rows:
        return
    with engine.begin() as connection:
        payloads = payloads_of(engine)
        connection.execute(insert(runs), [seal_task(row, payloads) for row in rows])
        if wake:
            backend_for(engine.dialect.name).wake_workers(connection)


def refresh_statistics(engine: Engine) -> None:
    """After a bulk insert: statistics the planner reads the claim index by (PostgreSQL)."""
    with engine.begin() as connection:
        backend_for(engine.dialect.name).refresh_statistics(connection)


def existing_runs(engine: Engine, run_ids: Sequence[str]) -> dict[str, RunRow]:
    """The runs among `run_ids` that exist, by id."""
    if not run_ids:
        return {}
    with plain_reading(engine) as reader:
        return reads.existing_runs(reader, run_ids)


def starts_with(column: ColumnElement[str], prefix: str) -> ColumnElement[bool]:
    """`column LIKE 'prefix%'`, with the prefix's own % and _ taken literally (and fast: an
    index on the column serves it, where a function of the column would not)."""
    return column.like(reads.like_prefix(prefix), escape="\\")


def get_run(engine: Engine, run_id: str) -> RunRow:
    with plain_reading(engine) as reader:
        return reads.get_run(reader, run_id)


def find_run(engine: Engine, prefix: str) -> RunRow:
    """The run whose id is `prefix`, or the only one whose id starts with it."""
    with plain_reading(engine) as reader:
        return reads.find_run(reader, prefix)


def load_entries(
    engine: Engine, run_id: str, kinds: Sequence[EntryKind] = ()
) -> list[tuple[Entry, int]]:
    """A run's journal in order (only the entries of `kinds`, if given), each entry with the
    lease epoch that wrote it."""
    with plain_reading(engine) as reader:
        return reads.load_entries(reader, run_id, kinds)


def entries_after(engine: Engine, run_id: str, after: int, limit: int) -> list[tuple[int, Entry]]:
    """At most `limit` of the run's journal entries after position `after`, in order."""
    with plain_reading(engine) as reader:
        return reads.entries_after(reader, run_id, after, limit)


def last_entries(engine: Engine, run_ids: Sequence[str]) -> dict[str, tuple[Counters, datetime]]:
    """The counters after each run's last journal entry, and when it was written: the
    counters so far of an unfinished run (its row holds them only once it finishes)."""
    if not run_ids:
        return {}
    with plain_reading(engine) as reader:
        return reads.last_entries(reader, run_ids)


def lock_run(connection: Connection, run_id: str) -> Row[Any] | None:
    """The run's row, locked until the transaction ends (SQLite's BEGIN IMMEDIATE already
    holds the whole file; its compiler drops FOR UPDATE)."""
    return connection.execute(select(runs).where(runs.c.id == run_id).with_for_update()).first()


def stopped_values(
    connection: Connection, run_id: str, reason: StopReason, at: datetime
) -> dict[str, Any]:
    """The values that finish a run nobody is executing, with its journal's last counters."""
    with plain(connection) as reader:
        last = reads.last_entry(reader, run_id)
    counters = last[0].counters if last is not None else Counters()
    return {
        "status": RunStatus.FINISHED,
        "stop_reason": reason,
        "steps": counters.steps,
        "tokens": counters.tokens,
        "cost": counters.cost,
        "finished_at": at,
    }


# -- reading history ------------------------------------------------------------------------


def list_runs(
    engine: Engine,
    *,
    status: RunStatus | None = None,
    stop_reason: StopReason | None = None,
    release: str | None = None,
    limit: int = 20,
    lease_expired_at: datetime | None = None,
    lease_live_at: datetime | None = None,
    owner_prefix: str | None = None,
) -> Sequence[RunRow]:
    """Runs, newest first (runner.sql.reads.list_runs, which says what the filters do)."""
    with plain_reading(engine) as reader:
        return reads.list_runs(
            reader, status=status, stop_reason=stop_reason, release=release, limit=limit,
            lease_expired_at=lease_expired_at, lease_live_at=lease_live_at,
            owner_prefix=owner_prefix,
        )  # fmt: skip
