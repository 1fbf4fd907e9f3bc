"""A parent's park with its first child, created claimed, and the child's task: ONE statement
on PostgreSQL.

A sub-agent's call parks its parent in one transaction (runner.sql.fencing): the parent's
entries (fenced), its move to `waiting`, the child's row created claimed for the worker's
slot, the child's task entry and its first model call's hold on the tree's budgets. On
PostgreSQL each statement is a round trip; the move to `waiting`, the child's row and its
task depend only on each other, and go in one statement of data-modifying CTEs: the child is
inserted only from the parent's parked row (its fence, this worker's epoch), and its task
only from the child's inserted row (the child's fence, its epoch as created). No row at all
is inserted when the parent's fence fails, and the write is refused (LeaseLost), as the
park's own UPDATE refused it. The parent's entries come first, in their own fenced statement
that also reads its cancel flag: a run asked to cancel finishes instead, and creates no
child. The hold follows under the tree's lock, which must be taken before its read's
snapshot (runner.sql.tree_budget).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Update, bindparam, insert, select
from sqlalchemy.engine import Dialect

from runner.sql import children
from runner.sql.backend import backend_for
from runner.sql.driver import Parameters, prepared
from runner.sql.schema import entries, runs
from runner.store.rows import ENTRY_COLUMNS


def one_statement(dialect: Dialect, made: Sequence[dict[str, Any]]) -> bool:
    """Whether a park that creates the child runs `made` (the first created claimed, with
    its task) goes in one statement (`park_with_child`): one child, on PostgreSQL."""
    return len(made) == 1 and backend_for(dialect.name).writes_in_ctes


def park_with_child(
    dialect: Dialect,
    park: Callable[[], Update],
    park_values: dict[str, Any],
    child: dict[str, Any],
    task: dict[str, Any],
) -> tuple[str, Parameters]:
    """The statement and parameters of the park (`park()`, the fenced UPDATE of the parent's
    row, built once, with `park_values`), the child's row (`child`, created claimed: `children.
    claimed_child`) and its task's entry row (`task`, by entry column)."""

    def build() -> Any:
        parked = park().returning(runs.c.id).cte("parked")
        names = children.child_columns(claimed=True)
        created = (
            insert(runs)
            .from_select(
                names,
                select(*[bindparam(f"child_{n}", type_=runs.c[n].type) for n in names]).select_from(
                    parked
                ),
            )
            .returning(runs.c.lease_epoch)
            .cte("child")
        )
        values = select(
            *[bindparam(f"task_{n}", type_=entries.c[n].type) for n in ENTRY_COLUMNS]
        ).select_from(created)
        fenced = values.where(created.c.lease_epoch == bindparam("task_lease_epoch"))
        return insert(entries).from_select(ENTRY_COLUMNS, fenced).add_cte(parked).add_cte(created)

    statement = prepared(dialect, "park_with_child", build)
    bound = dict(park_values)
    bound.update({f"child_{n}": v for n, v in children.child_values(child).items()})
    bound.update({f"task_{n}": v for n, v in task.items()})
    return statement.sql, statement.parameters(bound)
