"""operating runs: liveness, forks, and a run_summary that says which runs stalled

Three nullable columns on `runs`: `last_seen_at` (when the lease holder last claimed or
renewed the run: claims and heartbeats write it, never the per-step journal write),
`parent_run_id` and `parent_step` (where a fork came from). No foreign key on the parent:
pruning a parent leaves its forks alone.

`run_summary` gains `state` (the status, or `stalled` for a running run whose lease expired
by the database's clock), `last_seen_at`, `parent_run_id` and `parent_step`. A view sees the
lease's expiry against the database's `now()`, never whether the holder's process is dead:
`runner list` and `runner show` also call a run stalled when its holder, a process on their
own host, is gone. The view is dropped and created again: a view's columns are fixed when it
is created. `tool_calls` is left as it is (adding a nullable column to `runs` is a plain
ALTER TABLE on both databases); the downgrade, which rebuilds `runs` on SQLite, drops and
restores both views of revision 0002.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("last_seen_at", "parent_run_id", "parent_step")

# A running run is stalled once its lease ran out: nobody renews it, and any worker may
# take it over. A running run with no expiry has no holder either. SQLite keeps
# timestamps as UTC text 'YYYY-MM-DD HH:MM:SS.ffffff', which sorts as time does: now() is
# written the same way (to the millisecond).
_STATE = (
    "CASE WHEN r.status = 'running' AND (r.lease_expires_at IS NULL "
    "OR r.lease_expires_at < {now}) THEN 'stalled' ELSE r.status END"
)
_NOW = {"sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')", "postgresql": "now()"}

_RUN_SUMMARY = """
CREATE VIEW run_summary AS
SELECT
    r.id,
    r.agent,
    r.agent_name,
    r.release,
    r.task,
    r.status,
    {state} AS state,
    r.stop_reason,
    r.wrapped_up,
    r.error,
    {steps} AS steps,
    {tokens} AS tokens,
    {cost} AS cost,
    r.resumes,
    r.created_at,
    r.finished_at,
    {run_seconds} AS duration_seconds,
    {day} AS day,
    r.last_seen_at,
    r.parent_run_id,
    r.parent_step
FROM runs r{so_far_join}
"""


def _revision_0002() -> ModuleType:
    # Alembic loads revisions by path, not as a package: load 0002 the same way.
    path = Path(__file__).with_name("0002_history_views_and_indexes.py")
    spec = importlib.util.spec_from_file_location("runner_revision_0002", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_summary(dialect: str) -> str:
    views = _revision_0002()
    postgresql = dialect == "postgresql"
    expressions = dict(views._POSTGRESQL if postgresql else views._SQLITE)
    expressions["state"] = _STATE.format(now=_NOW["postgresql" if postgresql else "sqlite"])
    return _RUN_SUMMARY.format(**expressions)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column(
        "runs",
        sa.Column(
            "last_seen_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="holder's last claim or heartbeat",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "parent_run_id",
            sa.String(length=32),
            nullable=True,
            comment="the run this was forked from",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "parent_step", sa.Integer(), nullable=True, comment="steps copied from the parent"
        ),
    )
    # Runs claimed before this revision were last seen when their lease was last renewed,
    # as far as anyone can tell now: at least when they were taken.
    op.execute("UPDATE runs SET last_seen_at = leased_at WHERE leased_at IS NOT NULL")
    op.execute("DROP VIEW IF EXISTS run_summary")
    op.execute(_run_summary(dialect))
    _grant_reader("run_summary", dialect)


def _grant_reader(view: str, dialect: str) -> None:
    """A view made anew has no grants: give revision 0004's reader back its SELECT."""
    if dialect != "postgresql":
        return
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        f"THEN GRANT SELECT ON {view} TO runner_reader; END IF; END $$"
    )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    # On SQLite dropping a column rebuilds the table, which fails while a view reads it.
    op.execute("DROP VIEW IF EXISTS tool_calls")
    op.execute("DROP VIEW IF EXISTS run_summary")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for column in reversed(COLUMNS):
            batch_op.drop_column(column)
    for statement in _revision_0002()._views(dialect):
        op.execute(statement)
    for view in ("run_summary", "tool_calls"):
        _grant_reader(view, dialect)
