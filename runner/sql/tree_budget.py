"""A tree's budget held before each model call of a child run, the way provider limits are.

Charging spend up the tree as it is written (runner.sql.children) is not enough on its own:
children running at once each check their ancestors' spend as of their own last write, so
a crossing committed by one is unseen by the others, and each of them makes its next call.
So before its model call a child reserves from every ancestor's budget: one transaction,
serialised with every other reservation of the same tree (PostgreSQL: an advisory lock on
the root; SQLite: BEGIN IMMEDIATE), reads each ancestor's committed spend (its own and what
was charged below it) and the calls in flight below it (the rows of `tree_reservations`: one
step and the call's estimate of tokens each) in one statement, and

- stops the run, if an ancestor is cancelled or its committed spend leaves no room already
  (the same rule as a run's own budget, `over_budget`);
- parks it, if the spend and the calls in flight leave no room: they may yet settle for less
  than their estimates, so it is queued again to look in TREE_RECHECK_SECONDS, its lease let
  go (RunParked);
- or holds the call's step and estimate against every ancestor, and lets it go.

A child created claimed with its parent's park (a worker's relay) has its first call held
in the park's own transaction (`hold_ahead`: the same lock, read and rule, at the estimate
its parent reckons for it), where the tree has room; its call goes on that hold unless its
own estimate is larger, and reserves as above if not held.

A row needs no settle of its own: it counts while its run is `running` under the lease that
reserved it and its journal has not recorded the call's step. The entry that records the
model's output charges the real usage up the tree in the same transaction, so the estimate
gives way to the usage at once, never both and never neither. A worker that dies holding a
row leaves it counting until its run is taken over (then the old lease can write nothing:
its call's spend will never be charged) or finishes; its replacement reserves afresh. So a
tree goes over its budget only by the last call that found room and the estimation error
of the calls in flight beside it. Cost is not reserved (an estimate of it would need the
price): it is checked as spent, as before.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    bindparam,
    delete,
    exists,
    null,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.engine import Dialect

from runner.core.clock import Clock, utc_now
from runner.core.status import RunStatus
from runner.core.tree import Ancestor, Spend, TreeStop, ancestors_stop, crowded
from runner.errors import LeaseLost
from runner.sql import driver
from runner.sql.backend import backend_for
from runner.sql.children import ANCESTOR_COLUMNS, charged
from runner.sql.driver import Prepared, prepared
from runner.sql.schema import entries, runs, tree_reservations
from runner.store.rows import COUNTER_MAX, RunRow

# A run whose ancestors' budgets are held by calls in flight looks again this soon: when a
# call ends is not known ahead.
TREE_RECHECK_SECONDS = 0.5
# Rows that no longer count are deleted by the reservations of their tree; those a tree left
# behind at its end, by a reservation once this old, looked for at most once a
# SWEEP_EVERY_SECONDS in a process (each look was a statement of every child's model call).
STALE_SECONDS = 3600.0
SWEEP_EVERY_SECONDS = 60.0
_swept_at = [float("-inf")]  # when this process last looked (monotonic)


@dataclass(frozen=True)
class Held:
    """A call's hold on its ancestors' budgets (its row of `tree_reservations`)."""

    id: str


def counting() -> Any:
    """A row of `tree_reservations` still holds its ancestors' budgets: its run is running
    under the lease that reserved it, and its journal has not recorded the call's step.
    Binds `running` (RunStatus.RUNNING): the statements run as their driver takes them."""
    t = tree_reservations.c
    held = exists().where(
        runs.c.id == t.run_id,
        runs.c.lease_epoch == t.lease_epoch,
        runs.c.status == bindparam("running", type_=runs.c.status.type),
    )
    recorded = exists().where(entries.c.run_id == t.run_id, entries.c.steps >= t.step)
    return held & ~recorded


# A reservation's statements, rendered once per dialect and run on the driver's cursor: a
# child's model call built its four each time, which cost more CPU than the database's work
# (issue 39's profile).
_t = tree_reservations.c
_ROOT, _RUN = bindparam("root", type_=_t.root_id.type), bindparam("run", type_=_t.run_id.type)


def _drop_done() -> Any:
    """The run's own rows (a hold its last call left counting), and those that no longer
    count."""
    return delete(tree_reservations).where(_t.root_id == _ROOT, (_t.run_id == _RUN) | ~counting())


def _drop_stale() -> Any:
    return delete(tree_reservations).where(
        _t.reserved_at < bindparam("old", type_=_t.reserved_at.type), ~counting()
    )


def _tree(count: int, deleting: bool) -> Any:
    """The tree's calls in flight (rows with no id: the runs above each, in `budgets`, and
    its estimate, in `tokens`) and what each of the `count` runs above has to spend (its
    budgets, spend and cancel, as `charged` reads them): ONE statement, so one snapshot
    (a write that ends a call's hold also charges its usage, both or neither seen).
    `deleting`: the drop of the rows that no longer count goes first in the same statement
    (PostgreSQL's data-modifying WITH; the rows it drops are still in its snapshot)."""
    ids = [bindparam(f"above_{i}", type_=runs.c.id.type) for i in range(count)]
    holds = select(
        null().label("id"), _t.above, null(), _t.tokens, null(), null(), null(), null(), null()
    ).where(_t.root_id == _ROOT)
    if deleting:
        gone = _drop_done().returning(_t.id).cte("gone")
        holds = holds.where(_t.id.not_in(select(gone.c.id)))
    spend = select(*ANCESTOR_COLUMNS).where(runs.c.id.in_(ids))
    return union_all(holds, spend)


def _run(on: driver.Statements, statement: Prepared, values: dict[str, Any]) -> Sequence[Any]:
    return on.rows(statement.sql, statement.parameters(values))


def reserve(
    connection: Connection,
    run: RunRow,
    epoch: int,
    above: Sequence[str],
    step: int,
    tokens: int,
    clock: Clock,
) -> Held | TreeStop | datetime:
    """Hold step `step`'s model call of `run` against the budgets of the runs `above` it
    (nearest first), in the caller's transaction: its hold, why the run must stop, or the
    time it is parked until (see the module's doc)."""
    root = run.root_id or above[-1]
    dialect, on = connection.dialect, driver.Within(connection)
    at = utc_now(clock)
    ancestors, held = _room(on, dialect, root, run.id, above, at)
    stop = ancestors_stop(ancestors)
    if stop is not None:
        return stop
    if crowded(ancestors, held) is not None:
        until = at + timedelta(seconds=TREE_RECHECK_SECONDS)
        parked = connection.execute(
            update(runs)
            .where(
                runs.c.id == run.id, runs.c.lease_epoch == epoch, runs.c.status == RunStatus.RUNNING
            )
            .values(
                status=RunStatus.QUEUED,
                lease_owner=None,
                lease_expires_at=None,
                not_before=until,
                updated_at=at,
            )
        ).rowcount
        if not parked:
            raise LeaseLost(f"run {run.id} was taken over by another worker")
        return until
    hold = Held(uuid.uuid4().hex)
    _hold(on, dialect, HoldAhead(hold.id, root, run.id, epoch, tuple(above), step, tokens), at)
    return hold


@dataclass(frozen=True)
class HoldAhead:
    """A child's first model call held in its parent's park, before its loop starts
    (`hold_ahead`): its row's values, fixed before the transaction so that a try again
    writes the same one."""

    id: str
    root_id: str
    run_id: str
    lease_epoch: int  # the child's, created claimed (a queued child's hold would not count)
    above: tuple[str, ...]  # the child's ancestors, nearest (its parent) first
    step: int
    tokens: int


def hold_ahead(on: driver.Statements, dialect: Dialect, ahead: HoldAhead, at: datetime) -> bool:
    """Hold a child's first model call against its ancestors' budgets in the transaction
    that creates it (its parent's park, after the parent's row and the child's): the same
    rule, lock and read as `reserve`, and the same row, whose count starts at this commit
    as a reservation's does at its own. False, holding nothing, where `reserve` would stop
    or park the child: it is left to the child's own reservation, which does."""
    ancestors, held = _room(on, dialect, ahead.root_id, ahead.run_id, ahead.above, at)
    if ancestors_stop(ancestors) is not None or crowded(ancestors, held) is not None:
        return False
    _hold(on, dialect, ahead, at)
    return True


def _room(
    on: driver.Statements,
    dialect: Dialect,
    root: str,
    run_id: str,
    above: Sequence[str],
    at: datetime,
) -> tuple[list[Ancestor], dict[str, Spend]]:
    """Under the tree's lock: what each run `above` has spent (and its budgets and cancel),
    and the calls in flight below each (a step and an estimate of tokens a call), the run's
    own rows and those that no longer count dropped first."""
    _lock_tree(on, dialect, root)
    running = str(RunStatus.RUNNING)
    bound = {"root": root, "run": run_id, "running": running}
    bound.update({f"above_{i}": ancestor for i, ancestor in enumerate(above)})
    # One round trip fewer where each costs one: the drop inside the read.
    deleting = backend_for(dialect.name).locks_trees
    if not deleting:
        drop = prepared(dialect, "tree_drop_done", _drop_done)
        on.execute(drop.sql, drop.parameters({"root": root, "run": run_id, "running": running}))
    if time.monotonic() - _swept_at[0] >= SWEEP_EVERY_SECONDS:
        _swept_at[0] = time.monotonic()
        old = at - timedelta(seconds=STALE_SECONDS)
        stale = prepared(dialect, "tree_drop_stale", _drop_stale)
        on.execute(stale.sql, stale.parameters({"old": old, "running": running}))
    read = prepared(dialect, ("tree", len(above), deleting), lambda: _tree(len(above), deleting))
    held: dict[str, Spend] = {}
    spent = []
    for row in _run(on, read, bound):
        if row[0] is not None:
            spent.append(row)
            continue
        for ancestor in _ids(row[1]):
            held[ancestor] = held.get(ancestor, Spend()) + Spend(1, int(row[3]), 0.0)
    return charged(spent, above), held


def _hold(on: driver.Statements, dialect: Dialect, hold: HoldAhead, at: datetime) -> None:
    insert = prepared(dialect, "tree_hold", tree_reservations.insert)
    on.execute(
        insert.sql,
        insert.parameters(
            {
                "id": hold.id,
                "root_id": hold.root_id,
                "run_id": hold.run_id,
                "lease_epoch": hold.lease_epoch,
                "step": hold.step,
                "above": list(hold.above),
                "tokens": min(max(hold.tokens, 0), COUNTER_MAX),
                "reserved_at": at,
            }
        ),
    )


def release(connection: Connection, hold: Held) -> None:
    """The call made no entry (it failed, or the run stopped or parked before it): its hold
    goes at once."""
    connection.execute(delete(tree_reservations).where(tree_reservations.c.id == hold.id))


def _lock_tree(on: driver.Statements, dialect: Dialect, root: str) -> None:
    """Take the tree's turn to reserve, until the transaction ends (SQLite's BEGIN
    IMMEDIATE already holds the whole file's). PostgreSQL's advisory lock takes no row lock,
    so it orders nothing against the journal's writes and the heartbeat's."""
    if not backend_for(dialect.name).locks_trees:
        return
    digest = hashlib.sha256(f"runner tree {root}".encode()).digest()[:8]
    key = int.from_bytes(digest, "big", signed=True)
    lock = prepared(dialect, "tree_lock", _advisory_lock)
    on.execute(lock.sql, lock.parameters({"key": key}))


def _advisory_lock() -> Any:
    return text("SELECT pg_advisory_xact_lock(:key)").bindparams(bindparam("key", type_=BigInteger))


def _ids(value: Any) -> list[str]:
    if isinstance(value, str):  # SQLite's driver gives JSON back as text
        import json

        value = json.loads(value)
    return [str(run_id) for run_id in value]
