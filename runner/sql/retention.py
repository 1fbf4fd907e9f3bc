"""Retention: finished runs deleted by the rules of their queue, a small batch at a time.

A queue's rules are two columns of its row in `queues`: `keep_seconds` (a finished run is
deleted once it finished longer ago than this) and `keep_runs` (only the newest this many
finished runs of the queue are kept). The row named `*` (DEFAULT_RULES) holds the default of
every queue whose own row leaves a rule NULL. A run is deleted, with its journal (the
foreign key cascades), when either rule says so.

Only finished runs are ever deleted, and never one whose tree (`root_id`) still has a run
that is not finished: a queued, running or waiting run, a sub-agent's finished parent whose
tree goes on, a child whose root still runs all stay (`tree_finished`, which `runner prune`
shares). Workers apply the rules
(`prune_expired`): each batch is one short transaction that picks at most `batch_size` runs
(on PostgreSQL with FOR UPDATE SKIP LOCKED: two workers never wait on each other's rows)
and deletes them with the rules checked again in the DELETE itself, so a run revived
meanwhile (queued again) is left alone. `runner prune` stays for one-off deletions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, and_, delete, exists, select, text

from runner.core.status import RunStatus
from runner.sql.backend import backend_for
from runner.sql.partitions import ensure_months
from runner.sql.runs import reading, store_named
from runner.sql.schema import queues, runs
from runner.store.rules import (
    BATCH_SIZE,
    BATCHES_PER_PASS,
    Expired,
    Rules,
    check_keep_runs,
    check_keep_seconds,
    check_rules_name,
    cutoff,
    effective,
)


def set_rules(engine: Engine, name: str, rules: Rules, at: datetime) -> None:
    """Store a queue's rules (or, for `*`, the default's): both, as given."""
    name = check_rules_name(name)
    values = {
        "keep_seconds": check_keep_seconds(rules.keep_seconds),
        "keep_runs": check_keep_runs(rules.keep_runs),
        "updated_at": at,
    }
    store_named(engine, queues, name, values, f"the rules of queue {name}")


def stored_rules(connection: Connection) -> dict[str, Rules]:
    """Every row's rules by queue name (`*`: the default), rows with none left out."""
    found = connection.execute(select(queues.c.name, queues.c.keep_seconds, queues.c.keep_runs))
    rules = {name: Rules(seconds, count) for name, seconds, count in found}
    return {name: rule for name, rule in rules.items() if rule}


# The queues with finished runs, read as a loose index scan of ix_runs_claim (status, queue,
# ...): one index probe per queue, not a read of every finished run.
_FINISHED_QUEUES = text(
    """
WITH RECURSIVE found(queue) AS (
    SELECT MIN(queue) FROM runs WHERE status = 'finished'
    UNION ALL
    SELECT (SELECT MIN(r.queue) FROM runs r WHERE r.status = 'finished' AND r.queue > f.queue)
    FROM found f
    WHERE f.queue IS NOT NULL
)
SELECT queue FROM found WHERE queue IS NOT NULL
"""
)


def _expired(queue: str, rules: Rules, now: datetime, connection: Connection) -> Any | None:
    """The condition of a run of `queue` the rules delete (None: they delete nothing), by
    the rule both stores keep (runner.store.rules' `cutoff`)."""
    finished = and_(runs.c.status == RunStatus.FINISHED, runs.c.queue == queue)
    oldest_kept = None
    if rules.keep_runs:
        oldest_kept = connection.execute(
            select(runs.c.finished_at)
            .where(finished)
            .order_by(runs.c.finished_at.desc())
            .offset(rules.keep_runs - 1)
            .limit(1)
        ).scalar()
    chosen = cutoff(rules, now, oldest_kept)
    if chosen is None:
        return None
    condition: ColumnElement[bool]
    if chosen.everything:
        condition = runs.c.finished_at.is_not(None)
    else:
        condition = runs.c.finished_at < chosen.before
    return and_(finished, condition, tree_finished())


def tree_finished() -> ColumnElement[bool]:
    """True of a run whose whole tree (its `root_id`'s runs) is finished.

    Retention and `runner prune` delete no other run: a sub-agent's finished child stays
    while its parent, an ancestor or a sibling still runs (the parent's journal names it,
    and a revived parent reads its result). A condition on `runs`, correlated: it holds in a
    SELECT and again in the DELETE, so a child started in the tree meanwhile keeps it.
    """
    tree = runs.alias("tree")
    return ~exists().where(tree.c.root_id == runs.c.root_id, tree.c.status != RunStatus.FINISHED)


def prune_expired(
    engine: Engine,
    now: datetime,
    *,
    batch_size: int = BATCH_SIZE,
    batches: int = BATCHES_PER_PASS,
) -> Expired:
    """Delete the finished runs the rules of their queues expire at `now`: at most
    `batches` transactions of at most `batch_size` runs each (the next pass goes on)."""
    done = Expired()
    if backend_for(engine.dialect.name).partitions_journal:
        with engine.begin() as connection:  # the journal's months ahead (PostgreSQL)
            ensure_months(connection, now)
    with reading(engine) as connection:
        rules = stored_rules(connection)
        if not rules:
            return done  # no rule anywhere: not even a look at the runs
        names = list(connection.execute(_FINISHED_QUEUES).scalars())
    for queue in names:
        chosen = effective(rules, queue)
        if not chosen:
            continue
        while batches > 0:
            batches -= 1
            deleted = _delete_batch(engine, queue, chosen, now, batch_size)
            done.runs += deleted
            done.queues[queue] += deleted
            if deleted < batch_size:
                break
    return done


def _delete_batch(engine: Engine, queue: str, rules: Rules, now: datetime, size: int) -> int:
    with engine.begin() as connection:
        condition = _expired(queue, rules, now, connection)
        if condition is None:
            return 0
        ids = list(
            connection.execute(
                select(runs.c.id)
                .where(condition)
                .order_by(runs.c.finished_at)
                .limit(size)
                .with_for_update(skip_locked=True)
            ).scalars()
        )
        if not ids:
            return 0
        # The rules again, in the DELETE: a run revived (or a child started in its tree)
        # since it was picked is not deleted. Its journal goes with it (ON DELETE CASCADE).
        return int(connection.execute(delete(runs).where(runs.c.id.in_(ids), condition)).rowcount)
