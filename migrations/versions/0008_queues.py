"""queues: named queues with limits, priorities and delayed runs

- `runs.queue` (text, default 'default'): the queue a worker claims the run from
  (`runner worker --queue a,b` serves only those);
- `runs.priority` (integer, default 0): higher is claimed first, then the oldest;
- `runs.not_before` (nullable): a delayed run, never claimed before that time (on the
  database's clock);
- the indexes a claim reads its next queued run from, in order: `ix_runs_claim` (status,
  queue, priority DESC, created_at, id, not_before) for a worker serving one queue, and
  `ix_runs_claim_any_queue` (status, priority DESC, created_at, id, queue, not_before) for
  one serving several or all;
- the table `queues` (name, max_running, updated_at): how many runs of a queue may run at
  once across all workers, enforced where runs are claimed. A queue with no row, or a NULL
  max_running, has no limit.

The columns are added with plain ALTER TABLE on both databases, with server defaults, so
every run already stored lands in the queue 'default' at priority 0: on SQLite a batch
rebuild of `runs` would drop the old table, and its implicit DELETE would cascade to every
journal entry. `run_summary` is made again with `queue`, `priority` and `not_before` last
(stop reasons per queue are one GROUP BY away), and its SELECT given back to the reader
role of revision 0004, which may SELECT the new table too (`runner sql "SELECT * FROM
queues"`). The other views read no new column and stay as they are.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


COLUMNS = ("queue", "priority", "not_before")


def _run_summary_0005(dialect: str) -> str:
    # Alembic loads revisions by path, not as a package: load 0005 the same way.
    path = Path(__file__).with_name("0005_operating_runs.py")
    spec = importlib.util.spec_from_file_location("runner_revision_0005", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module._run_summary(dialect))


def _run_summary(dialect: str) -> str:
    """Revision 0005's run_summary with the run's queue, priority and not_before last."""
    before = _run_summary_0005(dialect)
    last = "    r.parent_step\nFROM runs r"
    assert last in before
    added = "".join(f",\n    r.{column}" for column in COLUMNS)
    return before.replace(last, f"    r.parent_step{added}\nFROM runs r")


def _grant_reader(table: str, dialect: str) -> None:
    """A new table or view has no grants: give revision 0004's reader its SELECT on it."""
    if dialect != "postgresql":
        return
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
        f"THEN GRANT SELECT ON {table} TO runner_reader; END IF; END $$"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column(
        "runs",
        sa.Column(
            "queue",
            sa.String(length=64),
            nullable=False,
            server_default="default",
            comment="the queue a worker claims it from (--queue)",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "priority",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="higher is claimed first within the queues a worker serves",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "not_before",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="a delayed run: no claim before this",
        ),
    )
    op.create_index(
        "ix_runs_claim",
        "runs",
        ["status", "queue", sa.text("priority DESC"), "created_at", "id", "not_before"],
        unique=False,
    )
    op.create_index(
        "ix_runs_claim_any_queue",
        "runs",
        ["status", sa.text("priority DESC"), "created_at", "id", "queue", "not_before"],
        unique=False,
    )
    op.create_table(
        "queues",
        sa.Column(
            "name",
            sa.String(length=64),
            nullable=False,
            comment="the queue's name, as runs.queue",
        ),
        sa.Column(
            "max_running",
            sa.Integer(),
            nullable=True,
            comment="most runs of the queue running at once, across all workers; NULL: no limit",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="when the limit was last set",
        ),
        sa.PrimaryKeyConstraint("name"),
        comment="limits of queues; a queue with no row here has no limit",
    )
    _grant_reader("queues", dialect)
    op.execute("DROP VIEW IF EXISTS run_summary")
    op.execute(_run_summary(dialect))
    _grant_reader("run_summary", dialect)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.drop_table("queues")  # its grants go with it
    # The view reads the columns: it goes first, and comes back as revision 0005 made it.
    op.execute("DROP VIEW IF EXISTS run_summary")
    op.drop_index("ix_runs_claim_any_queue", table_name="runs")
    op.drop_index("ix_runs_claim", table_name="runs")
    # DROP COLUMN, not a batch rebuild (SQLite 3.35 or later): see revision 0006.
    for column in reversed(COLUMNS):
        op.drop_column("runs", column)
    op.execute(_run_summary_0005(dialect))
    _grant_reader("run_summary", dialect)
