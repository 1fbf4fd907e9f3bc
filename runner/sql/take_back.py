"""A waiting parent read, answered and claimed back by the delivery of its children's ends
(runner.sql.children.deliver_in), on the driver's cursor.

The delivery of a sub-agent's end is on the path of every sub-agent's call on a worker: its
statements ran through SQLAlchemy's `Connection.execute` (an execution context and a result
for each: more CPU than the database's own work), and on PostgreSQL each is a round trip.
Here the parent's row is read (and locked) as plain SQL, the answers are inserted and the
parent is claimed back as statements rendered once (runner.sql.driver); on PostgreSQL the
answer rides in the claim's UPDATE as a data-modifying CTE, one round trip for both.

The claim is the one `runner.sql.leases.take` makes of a run nobody holds (a waiting run's
lease is gone): its epoch bumped, fencing out any writer of an older one, under the row
lock taken by the read; the journal's length counted in its UPDATE. A row that is not that
(a lease still held, a crash loop) is claimed by `leases.take` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, update
from sqlalchemy.engine import Dialect

from runner.sql import driver, leases, reads
from runner.sql.backend import backend_for
from runner.sql.driver import Prepared, prepared
from runner.sql.runs import entry_insert, prepared_entry_insert
from runner.sql.schema import entries, runs
from runner.store.rows import RunRow
from runner.store.rules import Claim, Relay

# The parent's row as a claim reads it: a RunRow's columns and the claim's own two.
_PARENT = (
    f"SELECT {', '.join(reads.RUN_FIELDS)}, stalled_resumes, progress_seq "
    "FROM runs WHERE id = :run_id"
)


def locked_parent(connection: Connection, parent_id: str) -> dict[str, Any] | None:
    """The parent's row by column name, decoded as SQLAlchemy's types give it back, and
    locked until the transaction ends (PostgreSQL's row lock; SQLite's BEGIN IMMEDIATE
    holds the whole file already). None if there is no such run."""
    sql = _PARENT + backend_for(connection.dialect.name).row_lock
    with reads.plain(connection) as reader:
        rows = reader.rows(sql, {"run_id": parent_id})
    return rows[0] if rows else None


def answer_and_take(
    connection: Connection,
    row: dict[str, Any],
    answers: Sequence[dict[str, Any]],
    relay: Relay,
    at: datetime,
) -> Claim:
    """Insert `answers` (entry rows, runner.store.rows.entry_row) in the parent's journal
    and claim the parent (`row`, as `locked_parent` read it) for the relay's owner, in the
    caller's transaction: the claim a claim of it queued would make, its wait ended."""
    dialect = connection.dialect
    on = driver.Within(connection)
    # Not a run whose lease was let go, or one a claim gives up: the general claim, which
    # counts a takeover and ends a crash loop, after the answers.
    general = row["lease_owner"] is not None or row["stalled_resumes"] > relay.max_resumes
    together = backend_for(dialect.name).writes_in_ctes and len(answers) == 1 and not general
    if not together:
        answer = prepared_entry_insert(dialect)
        for answered in answers:
            on.execute(answer.sql, answer.parameters(dict(answered)))
    if general:
        return leases.take(
            connection, row, relay.owner, relay.lease_seconds, relay.max_resumes, at, unwait=True
        )
    values = leases.leased(row, relay.owner, relay.lease_seconds, at)
    epoch = values["lease_epoch"]
    bound = {f"new_{name}": value for name, value in values.items()}
    bound["run_id"] = row["id"]
    if together:
        statement = _taking(dialect, answered=True)
        bound.update(answers[0])
        bound["answers"] = 1  # not seen by the count: inserted by the same statement
    else:
        statement = _taking(dialect, answered=False)
        bound["answers"] = 0
    returned = on.rows(statement.sql, statement.parameters(bound))
    if len(returned) != 1:  # its row is locked: it cannot have gone
        raise RuntimeError(f"run {row['id']} was not claimed back")
    recorded = returned[0][0]
    fresh = {
        **row,
        **values,
        "waiting_since": None,
        "wait_expires_at": None,
        "progress_seq": recorded,
    }
    return Claim(
        RunRow.of(fresh), epoch, recorded, crash_loop=False, stalled=row["stalled_resumes"]
    )


def _taking(dialect: Dialect, *, answered: bool) -> Prepared:
    """The UPDATE that claims the parent back, returning the journal's length (counted in
    it, plus `answers` inserted by its own CTE: a statement does not see its CTEs' rows);
    `answered`: with the answer's INSERT as that CTE."""

    def build() -> Any:
        values: dict[Any, Any] = {
            runs.c[name]: bindparam(f"new_{name}", type_=runs.c[name].type)
            for name in leases.LEASED
        }
        counted = (
            select(func.count())
            .select_from(entries)
            .where(entries.c.run_id == bindparam("run_id"))
            .scalar_subquery()
        )
        values[runs.c.progress_seq] = counted + bindparam("answers", type_=runs.c.progress_seq.type)
        values[runs.c.waiting_since] = None
        values[runs.c.wait_expires_at] = None
        statement = (
            update(runs)
            .where(runs.c.id == bindparam("run_id"))
            .values(values)
            .returning(runs.c.progress_seq)
        )
        if answered:
            statement = statement.add_cte(entry_insert().returning(entries.c.seq).cte("answer"))
        return statement

    return prepared(dialect, ("take_back", answered), build)
