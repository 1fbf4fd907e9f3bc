"""retention: how long finished runs of a queue are kept, applied by the workers

Two nullable columns on `queues`, added last:
- `keep_seconds`: finished runs of the queue are deleted (with their journals) once they
  finished longer ago than this;
- `keep_runs`: only the newest this many finished runs of the queue are kept.
NULL: no such rule. The row named `*` holds the default of every queue whose own row does
not set the rule. Workers apply the rules in small batches (runner.sql.retention); runs
that are not finished, or whose tree still has a run that is not, are never deleted.

Plain ALTER TABLE on both databases; no view reads `queues`.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-15
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "queues",
        sa.Column(
            "keep_seconds",
            sa.BigInteger(),
            nullable=True,
            comment="finished runs are deleted this long after they finished; NULL: kept",
        ),
    )
    op.add_column(
        "queues",
        sa.Column(
            "keep_runs",
            sa.Integer(),
            nullable=True,
            comment="only the newest this many finished runs are kept; NULL: all",
        ),
    )


def downgrade() -> None:
    # DROP COLUMN, not a batch rebuild (SQLite 3.35 or later): see revision 0006.
    op.drop_column("queues", "keep_runs")
    op.drop_column("queues", "keep_seconds")
