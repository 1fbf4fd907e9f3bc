"""trees of runs: a child's parent and root, forks renamed, spend per root

A sub-agent is a child run started by a tool call of its parent. Three nullable columns on
`runs`, added last:
- `parent_id`: the run whose call started this one (NULL for a root);
- `root_id`: the tree's root (a root's own id; every run stored before this revision is a
  root, and gets its own id here);
- `parent_call_key`: the idempotency key of the parent's call that started this run;
indexed as `ix_runs_parent_id_created_at` (the children of a run) and
`ix_runs_root_id_created_at` (every run of a tree).

A fork is another relation (a copy of a run's first steps, not a child), so its columns
are renamed, to be never confused with the tree's: `parent_run_id` becomes `forked_from_id`
and `parent_step` becomes `forked_at_step`. `run_summary` is made again with the new
names, and `parent_id` and `root_id` last; the new view `root_spend` sums each tree's spend
(steps, tokens and cost so far of every run in it, each run's own) with how many of its
runs are in each status.

Only plain ALTER TABLE (ADD, RENAME and DROP COLUMN) on both databases: on SQLite a batch
rebuild of `runs` would drop the old table, and with foreign keys on, SQLite's implicit
DELETE of it would cascade to every journal entry (see revision 0006). SQLite renames a
column with ALTER TABLE ... RENAME COLUMN from 3.25 on and drops one from 3.35 on; the
views that read `runs` are dropped first, as SQLite checks them on every such change.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-13
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RENAMED = (("parent_run_id", "forked_from_id"), ("parent_step", "forked_at_step"))
TREE = ("parent_id", "root_id", "parent_call_key")
INDEXES = (
    ("ix_runs_parent_id_created_at", ["parent_id", "created_at"]),
    ("ix_runs_root_id_created_at", ["root_id", "created_at"]),
)
# Comments PostgreSQL keeps on the renamed columns (SQLite keeps none).
_COMMENT = ("steps copied from the parent", "steps copied from that run")

# Each tree's spend: the counters so far of every run in it, each run's own, summed (as
# run_summary counts them: an unfinished run's from its journal), and its runs by status.
# It reads the tables, not run_summary: a view over that view would make every later
# migration that makes run_summary again drop this one first (PostgreSQL refuses a DROP
# VIEW that another view depends on).
_ROOT_SPEND = """
CREATE VIEW root_spend AS
SELECT
    COALESCE(r.root_id, r.id) AS root_id,
    COUNT(*) AS runs,
    SUM({steps}) AS steps,
    SUM({tokens}) AS tokens,
    SUM({cost}) AS cost,
    SUM(CASE WHEN r.status = 'queued' THEN 1 ELSE 0 END) AS queued,
    SUM(CASE WHEN r.status = 'running' THEN 1 ELSE 0 END) AS running,
    SUM(CASE WHEN r.status = 'waiting' THEN 1 ELSE 0 END) AS waiting,
    SUM(CASE WHEN r.status = 'finished' THEN 1 ELSE 0 END) AS finished,
    MIN(r.created_at) AS started_at,
    MAX(r.finished_at) AS last_finished_at
FROM runs r{so_far_join}
GROUP BY COALESCE(r.root_id, r.id)
"""


def _revision(name: str) -> Any:
    # Alembic loads revisions by path, not as a package: load earlier ones the same way.
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"runner_revision_{name[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_summary_0008(dialect: str) -> str:
    return str(_revision("0008_queues")._run_summary(dialect))


def _run_summary(dialect: str) -> str:
    """Revision 0008's run_summary with the fork's columns renamed and the tree's last."""
    before = _run_summary_0008(dialect)
    for old, new in RENAMED:
        assert f"    r.{old}," in before
        before = before.replace(f"    r.{old},", f"    r.{new},")
    last = "    r.not_before\nFROM runs r"
    assert last in before
    # A row inserted by hand without a root is a root (as RunRow reads it).
    tree = "    r.not_before,\n    r.parent_id,\n    COALESCE(r.root_id, r.id) AS root_id"
    return before.replace(last, tree + "\nFROM runs r")


def _root_spend(dialect: str) -> str:
    views = _revision("0002_history_views_and_indexes")
    return _ROOT_SPEND.format(**(views._POSTGRESQL if dialect == "postgresql" else views._SQLITE))


def _grant_reader(views: tuple[str, ...], dialect: str) -> None:
    """Views made anew have no grants: give revision 0004's reader its SELECT on them."""
    if dialect != "postgresql":
        return
    grants = " ".join(f"GRANT SELECT ON {view} TO runner_reader;" for view in views)
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        f"THEN {grants} END IF; END $$"
    )


def _drop_views() -> None:
    # Every view that reads `runs`: SQLite checks them all on a RENAME or DROP COLUMN.
    for view in ("root_spend", "approvals", "tool_calls", "run_summary"):
        op.execute(f"DROP VIEW IF EXISTS {view}")


def _views_0009(dialect: str) -> None:
    for statement in _revision("0009_waits_in_parallel_steps")._views(dialect):
        op.execute(statement)


def _comment(dialect: str, *, new: bool) -> None:
    if dialect != "postgresql":
        return
    before, after = _COMMENT
    op.alter_column(
        "runs",
        "forked_at_step",  # renamed just before (upgrade), or just after (downgrade)
        existing_type=sa.Integer(),
        existing_nullable=True,
        comment=after if new else before,
        existing_comment=before if new else after,
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_views()
    for old, new in RENAMED:
        op.execute(f"ALTER TABLE runs RENAME COLUMN {old} TO {new}")
    _comment(dialect, new=True)
    op.add_column(
        "runs",
        sa.Column(
            "parent_id",
            sa.String(length=32),
            nullable=True,
            comment="the run whose call started this one",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "root_id",
            sa.String(length=32),
            nullable=True,
            comment="the tree's root (a root: its own id)",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "parent_call_key",
            sa.String(length=80),
            nullable=True,
            comment="idempotency key of the parent's call that started this run",
        ),
    )
    # Every run stored so far is a root.
    op.execute("UPDATE runs SET root_id = id WHERE root_id IS NULL")
    for name, columns in INDEXES:
        op.create_index(name, "runs", columns, unique=False)

    _views_0009(dialect)
    op.execute(_run_summary(dialect))
    op.execute(_root_spend(dialect))
    _grant_reader(("run_summary", "tool_calls", "approvals", "root_spend"), dialect)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_views()
    for name, _ in reversed(INDEXES):
        op.drop_index(name, table_name="runs")
    # DROP COLUMN, not a batch rebuild (SQLite 3.35 or later): see revision 0006.
    for column in reversed(TREE):
        op.drop_column("runs", column)
    _comment(dialect, new=False)
    for old, new in RENAMED:
        op.execute(f"ALTER TABLE runs RENAME COLUMN {new} TO {old}")

    # The views as revisions 0008 (run_summary) and 0009 (tool_calls, approvals) left them.
    _views_0009(dialect)
    op.execute(_run_summary_0008(dialect))
    _grant_reader(("run_summary", "tool_calls", "approvals"), dialect)
