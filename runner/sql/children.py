"""Trees of runs in SQL: child runs created with their parent's wait, spend charged up the
tree, a child's end delivered to its parent, and a cancel carried down.

- A sub-agent's call is journaled as a `wait` (`waits_for = 'child'`); the child run's row is
  inserted in the same fenced transaction that writes the wait and parks the parent
  (`runner.sql.fencing`): a crash leaves both or neither, and the child's id, derived from
  the call's key, is the same on every resume. A child created claimed for the parent's
  worker (its relay) has its task and its first model call's hold in it too
  (`fencing.FirstCall`).
- Every journal write of a child that spent something charges it to each ancestor's
  `below_*` columns in the same transaction (`charge_statement`), and reads back what each
  ancestor and the runs below it spent against its budgets: the child checks them before
  its next model call.
- A child's end is delivered (`deliver`) as the `answer` of its parent's wait: ONE
  transaction on the locked parent, only while it still waits for that call (exactly one
  delivery wins any race); the last one queues the parent again. A child whose end is an
  entry delivers it in that entry's commit (`deliver_in`, runner.sql.journal); any other
  end is delivered as soon as the child ends, by whoever ended it, and swept up by every
  worker's poll (`deliver_ended`), so a crash between a child's end and its delivery
  strands no parent.
- A cancel of any run asks every run below it to stop too (`subtree`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, insert, select, update
from sqlalchemy.engine import Dialect

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.faults import fault
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.tree import Ancestor, ChildRun, Spend, child_run_id, outcome_of
from runner.core.waiting import Answer, Asks
from runner.sql import approvals, take_back
from runner.sql.backend import backend_for
from runner.sql.driver import Prepared, prepared
from runner.sql.payloads import payloads_of
from runner.sql.schema import entries, runs
from runner.store.payloads import PLAIN, Payloads
from runner.store.rows import RunRow, amount, counter, entry_row, new_run
from runner.store.rules import PRIORITY_RANGE, Claim, Relay, answer_entry

# A tree deeper than this is refused outright (max_depth is far smaller in practice): the
# walk up a run's ancestors never loops, whatever the rows say.
DEEPEST = 64


# -- creating children -------------------------------------------------------------------


def child_row(
    child: ChildRun, parent: RunRow, at: datetime, payloads: Payloads = PLAIN
) -> dict[str, Any]:
    """The row of a child run: queued in its parent's queue, one priority above it, its
    deadline set now."""
    row = new_run(
        run_id=child.id,
        agent=child.agent,
        agent_name=child.agent_name,
        release=child.release,
        task=child.task,
        budgets=child.budgets,
        at=at,
        queue=parent.queue,
        # One above its parent's (within the range a submit may give): a tree's children
        # are claimed before the runs queued at their root's priority, so a tree in flight
        # finishes before new ones start, rather than wait behind the whole queue.
        priority=min(parent.priority + 1, PRIORITY_RANGE[1]),
        parent_id=parent.id,
        root_id=parent.root_id or parent.id,
        parent_call_key=child.call_key,
        payloads=payloads,
    )
    seconds = child.budgets.get("max_seconds")
    if seconds is not None:
        row["deadline"] = at + timedelta(seconds=float(seconds))
    return row


def insert_child(dialect: Dialect, claimed: bool = False) -> Prepared:
    """The INSERT of a child run's row (every column of `new_run`'s, by name; `claimed`:
    and its lease's, see `claimed_child`)."""
    return prepared(
        dialect, ("insert_child", claimed), lambda: insert(runs).values(_child_binds(claimed))
    )


# The lease's columns of a child created claimed, beyond new_run's status and epoch.
_LEASE = ("lease_owner", "lease_expires_at", "leased_at", "last_seen_at")


def _child_binds(claimed: bool) -> dict[Any, Any]:
    return {
        runs.c[name]: bindparam(name, type_=runs.c[name].type) for name in child_columns(claimed)
    }


def child_columns(claimed: bool) -> list[str]:
    """The columns of a child's row as `insert_child` writes them."""
    # The columns new_run fills (whatever later revisions add to it), and the deadline.
    sample = new_run(
        run_id="", agent=None, agent_name=None, release=None, task="", budgets={},
        at=datetime.now(UTC), parent_id="", root_id="",
    )  # fmt: skip
    return [*sample, "deadline", *(_LEASE if claimed else ())]


def child_values(row: dict[str, Any]) -> dict[str, Any]:
    """A child row's values for `insert_child` (no deadline: NULL)."""
    return {"deadline": None, **row}


def is_claimed(row: dict[str, Any]) -> bool:
    return "lease_owner" in row


# The columns of a run's row that a new child's leaves to their defaults (all NULL).
_UNSET = dict.fromkeys(
    [
        *("deadline", "error", "finished_at", "output", "output_format", "stop_reason"),
        *("waiting_since", "wait_expires_at", "parked_reason"),
    ]
)


def claim_of(row: dict[str, Any], next_seq: int = 0) -> Claim:
    """The claim of a child created claimed (`claimed_child`), from the row it was inserted
    with: read back, it would be the same. `next_seq`: the entries written with it."""
    run = RunRow.of({**_UNSET, **row})
    return Claim(run, run.lease_epoch, next_seq, crash_loop=False)


def claimed_child(row: dict[str, Any], owner: str, lease_seconds: float) -> dict[str, Any]:
    """A child row created already claimed for `owner` (runner.store.rules.Relay): running
    under a lease from its creation, epoch 1, as a claim of it queued would have left it
    (nothing recorded, no resume)."""
    at = row["created_at"]
    return {
        **row,
        "status": RunStatus.RUNNING,
        "lease_epoch": row["lease_epoch"] + 1,
        "lease_owner": owner,
        "lease_expires_at": at + timedelta(seconds=lease_seconds),
        "leased_at": at,
        "last_seen_at": at,
    }


# -- the ancestors and their spend ---------------------------------------------------------


def ancestors(engine: Engine, run: RunRow) -> list[Ancestor]:
    """The runs above `run`, nearest first, with what each and its runs below spent."""
    found: list[Ancestor] = []
    parent_id = run.parent_id
    with engine.connect() as connection:
        while parent_id is not None and len(found) < DEEPEST:
            row = connection.execute(select(runs).where(runs.c.id == parent_id)).first()
            if row is None:
                break  # pruned: the tree above ends here
            above = RunRow.of(row)
            found.append(ancestor_of(above))
            parent_id = above.parent_id
    return found


# What an ancestor's budgets are judged on: its budgets, what it and the runs below it
# spent, and its cancel (read by a reservation, given back by a charge).
ANCESTOR_COLUMNS = (
    runs.c.id,
    runs.c.budgets,
    runs.c.steps,
    runs.c.tokens,
    runs.c.cost,
    runs.c.below_steps,
    runs.c.below_tokens,
    runs.c.below_cost,
    runs.c.cancel_requested,
)


def ancestor_of(run: RunRow) -> Ancestor:
    spent = Spend(run.steps, run.tokens, run.cost) + Spend(
        run.below_steps, run.below_tokens, run.below_cost
    )
    return Ancestor(run.id, run.budgets, spent, cancelled=run.cancel_requested)


def charge_statement(dialect: Dialect, count: int) -> Prepared:
    """UPDATE `count` ancestors' below_* by what a child just spent, returning each one's
    budgets and spend (its own as of its park, and below)."""

    def build() -> Any:
        ids = [bindparam(f"above_{i}", type_=runs.c.id.type) for i in range(count)]
        return (
            update(runs)
            .where(runs.c.id.in_(ids))
            .values(
                below_steps=runs.c.below_steps + bindparam("add_steps", type_=runs.c.steps.type),
                below_tokens=runs.c.below_tokens
                + bindparam("add_tokens", type_=runs.c.tokens.type),
                below_cost=runs.c.below_cost + bindparam("add_cost", type_=runs.c.cost.type),
            )
            .returning(*ANCESTOR_COLUMNS)
        )

    return prepared(dialect, ("charge_ancestors", count), build)


def charge_values(above: Sequence[str], spent: Spend) -> dict[str, Any]:
    values: dict[str, Any] = {f"above_{i}": run_id for i, run_id in enumerate(above)}
    values["add_steps"] = counter(spent.steps)
    values["add_tokens"] = counter(spent.tokens)
    values["add_cost"] = amount(spent.cost)
    return values


def charged(rows: Sequence[Any], order: Sequence[str]) -> list[Ancestor]:
    """The ancestors as the charge returned them, nearest first."""
    by_id = {}
    for row in rows:
        run_id, budgets, steps, tokens, cost, b_steps, b_tokens, b_cost, cancel = row
        if isinstance(budgets, str):
            budgets = json.loads(budgets)  # SQLite's driver gives JSON back as text
        spent = Spend(steps, tokens, cost) + Spend(b_steps, b_tokens, b_cost)
        by_id[run_id] = Ancestor(run_id, budgets, spent, cancelled=bool(cancel))
    return [by_id[run_id] for run_id in order if run_id in by_id]


# -- delivering a child's end ---------------------------------------------------------------


def deliver(
    engine: Engine, parent_id: str, clock: Clock = SYSTEM, relay: Relay | None = None
) -> bool:
    """Record the end of each finished child that `parent_id` waits for as its wait's
    answer; the last one queues the parent again. True if it was queued. With `relay`, the
    last one claims the parent for the relay's owner in the same transaction instead
    (`relay.next`): the worker whose child ended goes on with the parent on its slot."""
    with engine.begin() as connection:
        delivered = deliver_in(connection, parent_id, utc_now(clock), relay)
    return settled(delivered, relay)


def settled(delivered: Delivered, relay: Relay | None) -> bool:
    """After the commit of a delivery (`deliver_in`): the parent's claim handed to the
    relay, and whether the parent was made runnable (queued, or claimed)."""
    if not delivered.runnable:
        return False
    fault("after_delivery_commit")
    if relay is not None and delivered.claim is not None:
        relay.next = delivered.claim
    return True


@dataclass(frozen=True)
class Delivered:
    """What a delivery did in its transaction: whether it made the parent runnable, and
    the parent's claim if it took it for a relay (handed on only once committed)."""

    runnable: bool = False
    claim: Claim | None = None


_CHILDREN = select(runs).where(runs.c.id.in_(bindparam("ids", expanding=True)))
_ANSWER = insert(entries)
_UNWAIT = (
    update(runs)
    .where(runs.c.id == bindparam("run_id"), runs.c.status == RunStatus.WAITING)
    .values(
        status=RunStatus.QUEUED,
        waiting_since=None,
        wait_expires_at=None,
        updated_at=bindparam("at", type_=runs.c.updated_at.type),
    )
)


def deliver_in(
    connection: Connection,
    parent_id: str,
    at: datetime,
    relay: Relay | None = None,
    known: Ended | None = None,
) -> Delivered:
    """`deliver`'s work in the caller's transaction (a child's last write delivers its own
    end in its own: runner.sql.journal): the caller commits, then calls `settled`. `known`:
    the end of a child that this transaction finished (its row is not read again)."""
    row = take_back.locked_parent(connection, parent_id)
    if row is None:
        return Delivered()
    parent = RunRow.of(row)
    if parent.status is not RunStatus.WAITING:
        return Delivered()
    found = approvals.open_waits(connection, parent.id)
    if found is None:
        return Delivered()
    ended = _ended_children(connection, parent.id, [entry for entry, _ in found.waits], known)
    if not ended:
        return Delivered()
    seq = found.last_seq + 1
    kept = None if relay is None else relay.kept.pop(parent.id, None)
    if kept is not None and len(kept) == seq and relay is not None:
        relay.kept[parent.id] = kept  # else not the journal as it is: it is read again
    else:
        kept = None
    payloads = payloads_of(connection)
    answers = []
    for wait, content, is_error in ended:
        entry = answer_entry(wait, Answer.ENDED, content, None, is_error=is_error)
        answers.append(entry_row(parent.id, seq, parent.lease_epoch, entry, at, payloads))
        seq += 1
        if kept is not None:
            kept.append((entry, parent.lease_epoch))
    last = len(ended) == len(found.waits)
    if last and relay is not None:
        # Claimed as a claim of it queued would (its epoch bumped, fencing out any writer
        # of an older one), under the parent's row lock taken above; the answers go in
        # the claim's statement where the backend can (runner.sql.take_back).
        claim = take_back.answer_and_take(connection, row, answers, relay, at)
        fault("before_delivery_commit")
        return Delivered(True, claim)
    for values in answers:
        connection.execute(_ANSWER, values)
    fault("before_delivery_commit")
    if not last:
        return Delivered()
    # Queued again; unlike a person's answer, the deadline does not move: the time
    # its children took is the tree's.
    connection.execute(_UNWAIT, {"run_id": parent.id, "at": at})
    backend_for(connection.dialect.name).wake_workers(connection)
    return Delivered(True)


@dataclass(frozen=True)
class Ended:
    """A child's end as its parent's observation (`outcome_of`), known without its row."""

    run_id: str
    content: str
    is_error: bool


def _ended_children(
    connection: Connection, parent_id: str, waits: Sequence[Entry], known: Ended | None = None
) -> list[tuple[Entry, str, bool]]:
    """The parent's open child waits whose child has ended (or is gone), with the
    observation each child's end makes."""
    keyed = {
        child_run_id(parent_id, wait.idempotency_key or ""): wait
        for wait in waits
        if wait.waits_for == Asks.CHILD
    }
    if not keyed:
        return []
    others = [child_id for child_id in keyed if known is None or child_id != known.run_id]
    rows = connection.execute(_CHILDREN, {"ids": others}).all() if others else []
    children = {row.id: RunRow.of(row) for row in rows}
    ended = []
    for child_id, wait in keyed.items():
        child = children.get(child_id)
        if known is not None and child_id == known.run_id:
            ended.append((wait, known.content, known.is_error))
        elif child is None:
            ended.append((wait, f"SubAgentStopped: run {child_id} is gone (pruned?)", True))
        elif child.status is RunStatus.FINISHED:
            content, is_error = outcome_of(
                child.id, child.stop_reason, child.output, child.error, child.budgets
            )
            ended.append((wait, content, is_error))
    return ended


def deliver_ended(engine: Engine, clock: Clock = SYSTEM) -> int:
    """Deliver every finished child's end still owed to a waiting parent (a sweep: the
    child's own delivery may have been cut short by a crash): how many parents were
    queued again."""
    child = runs.alias("child")
    with engine.connect() as connection:
        parents = (
            connection.execute(
                select(runs.c.id)
                .where(runs.c.status == RunStatus.WAITING)
                .where(
                    select(child.c.id)
                    .where(
                        child.c.parent_id == runs.c.id,
                        child.c.status == RunStatus.FINISHED,
                        # Not delivered yet: no answer to its call in the parent's journal
                        # (a parent waiting for a person after its children's step is not
                        # read again every sweep).
                        ~select(entries.c.seq)
                        .where(
                            entries.c.run_id == runs.c.id,
                            entries.c.kind == EntryKind.ANSWER,
                            entries.c.idempotency_key == child.c.parent_call_key,
                        )
                        .exists(),
                    )
                    .exists()
                )
            )
            .scalars()
            .all()
        )
        # Each still checked against its open waits with a read: only a parent owed an end
        # takes the write lock.
        owed = [parent_id for parent_id in parents if _owed(connection, parent_id)]
    return sum(1 for parent_id in owed if deliver(engine, parent_id, clock))


def _owed(connection: Connection, parent_id: str) -> bool:
    found = approvals.open_waits(connection, parent_id)
    if found is None:
        return False
    return bool(_ended_children(connection, parent_id, [entry for entry, _ in found.waits]))


# -- children and cancels -------------------------------------------------------------------


def children_of(engine: Engine, run_id: str) -> list[RunRow]:
    """The run's children, oldest first."""
    with engine.connect() as connection:
        rows = connection.execute(
            select(runs).where(runs.c.parent_id == run_id).order_by(runs.c.created_at, runs.c.id)
        ).all()
    return [RunRow.of(row) for row in rows]


def subtree(engine: Engine, run_id: str) -> list[str]:
    """Every run below `run_id` that has not finished, parents before their children."""
    found: list[str] = []
    level = [run_id]
    with engine.connect() as connection:
        for _ in range(DEEPEST):
            if not level:
                break
            rows = connection.execute(
                select(runs.c.id, runs.c.status).where(runs.c.parent_id.in_(level))
            ).all()
            level = [row.id for row in rows]
            found.extend(row.id for row in rows if row.status != RunStatus.FINISHED)
    return found
