"""releases: a queue's policy for runs of another release, and runs a check parked

Two nullable columns, added last:
- `queues.older_releases`: what a worker does with a run of the queue whose release is not
  its own: `continue` (NULL: run it on, as before), `pin` (only a worker of the run's
  release takes it) or `check` (a worker of another release replays the run's journal
  against its own code before it takes the run on);
- `runs.parked_reason`: why a check parked the run (`check_failed`): only a worker of the
  run's release takes it from then on (NULL: not parked).

Plain ALTER TABLE on both databases; no view reads either column.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "queues",
        sa.Column(
            "older_releases",
            sa.String(length=16),
            nullable=True,
            comment="runs of another release than a worker's: continue, pin or check; "
            "NULL: continue",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "parked_reason",
            sa.String(length=32),
            nullable=True,
            comment="why a check parked the run (check_failed): only its release's "
            "workers take it; NULL: not parked",
        ),
    )


def downgrade() -> None:
    # DROP COLUMN, not a batch rebuild (SQLite 3.35 or later): see revision 0006.
    op.drop_column("runs", "parked_reason")
    op.drop_column("queues", "older_releases")
