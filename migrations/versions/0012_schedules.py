"""schedules: runs started on a cron schedule, exactly one per tick

- the table `schedules`: one row per schedule (`runner schedule add NAME AGENT TASK --cron
  ...`): what each tick runs (agent, task, budgets, queue, priority), when (a cron
  expression read in a time zone), the rules for a late tick (`catch_up`) and for a tick
  that comes while the previous run still goes (`overlap`), whether it is paused, and where
  it stands: `next_tick_at`, the first tick not yet handled (indexed with `paused`: what a
  worker reads at each look), and the last tick handled, with its run or why it was skipped;
- `runs.schedule`: the schedule that started a run (NULL for any other run), indexed with
  `created_at` (`runner list --schedule NAME`). No foreign key: removing a schedule leaves
  its runs.

Plain ALTER TABLE on both databases (on SQLite a batch rebuild of `runs` would drop the
old table, and its implicit DELETE would cascade to every journal entry: see revision
0006). No view changes: `runner stats --by schedule` joins `runs` to `run_summary`.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _grant_reader(table: str, dialect: str) -> None:
    """A new table has no grants: give revision 0004's reader its SELECT on it."""
    if dialect != "postgresql":
        return
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        f"THEN GRANT SELECT ON {table} TO runner_reader; END IF; END $$"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "schedules",
        sa.Column("name", sa.String(length=18), nullable=False, comment="the schedule's name"),
        sa.Column("agent", sa.Text(), nullable=False, comment="agent reference of its runs"),
        sa.Column("agent_name", sa.String(length=200), nullable=True),
        sa.Column("release", sa.String(length=200), nullable=True),
        sa.Column("task", sa.Text(), nullable=False, comment="the task of each run"),
        sa.Column("budgets", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("queue", sa.String(length=64), nullable=False, comment="queue of its runs"),
        sa.Column("priority", sa.Integer(), nullable=False, comment="priority of its runs"),
        sa.Column("cron", sa.String(length=200), nullable=False, comment="5-field cron"),
        sa.Column("timezone", sa.String(length=64), nullable=False, comment="IANA zone"),
        sa.Column("catch_up", sa.String(length=8), nullable=False, comment="last or skip"),
        sa.Column("overlap", sa.String(length=8), nullable=False, comment="skip or allow"),
        sa.Column("paused", sa.Boolean(), nullable=False, comment="true: no tick fires"),
        sa.Column(
            "next_tick_at",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="the first tick not yet handled",
        ),
        sa.Column(
            "last_tick_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="the last tick handled (fired or skipped)",
        ),
        sa.Column(
            "last_run_id", sa.String(length=32), nullable=True, comment="the last tick's run"
        ),
        sa.Column(
            "last_skip", sa.String(length=16), nullable=True, comment="why the last tick skipped"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
        comment="runs started on a cron schedule, one per tick",
    )
    op.create_index("ix_schedules_due", "schedules", ["paused", "next_tick_at"], unique=False)
    _grant_reader("schedules", dialect)
    op.add_column(
        "runs",
        sa.Column(
            "schedule",
            sa.String(length=18),
            nullable=True,
            comment="the schedule that started the run",
        ),
    )
    op.create_index("ix_runs_schedule_created_at", "runs", ["schedule", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_schedule_created_at", table_name="runs")
    # DROP COLUMN, not a batch rebuild (SQLite 3.35 or later): see revision 0006.
    op.drop_column("runs", "schedule")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_table("schedules")  # its grants go with it
