"""scores: scores of runs, by their agent's scorers or by a person

- the table `scores` (run_id, name, status, value, note, source, attempts, lease_owner,
  lease_epoch, lease_expires_at, created_at, started_at, scored_at): one score per run and
  name. A scorer's row is written `pending` when its run starts, claimed by a worker once
  the run has ended (`scoring`, under a lease and an epoch, as runs are), and written
  `scored` or `failed` fenced by that epoch: a score is kept once.
- the view `run_scores`: the scored rows with their run's agent, release and stop reason,
  for the questions users ask ("did release 2 answer better than release 1?").

A new table and view only: no existing row or view changes. The reader role of revision
0004 may SELECT both.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RUN_SCORES = """
CREATE VIEW run_scores AS
SELECT
    s.run_id,
    r.agent_name,
    r.release,
    s.name,
    s.value,
    s.note,
    s.source,
    r.stop_reason,
    r.created_at AS run_created_at,
    s.scored_at
FROM scores s
JOIN runs r ON r.id = s.run_id
WHERE s.status = 'scored'
"""


def upgrade() -> None:
    op.create_table(
        "scores",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column(
            "name",
            sa.String(length=80),
            nullable=False,
            comment="what is scored: one score per name",
        ),
        sa.Column(
            "status",
            sa.String(length=16),
            nullable=False,
            comment="pending (its scorer has not started), scoring (a worker runs it), scored "
            "(value is kept) or failed (note says why)",
        ),
        sa.Column("value", sa.Float(), nullable=True, comment="the score; NULL until scored"),
        sa.Column(
            "note", sa.Text(), nullable=True, comment="why: a judge's reasoning, or why it failed"
        ),
        sa.Column(
            "source",
            sa.String(length=16),
            nullable=False,
            comment="scorer (a scorer declared on the agent) or manual (runner score, the API)",
        ),
        sa.Column("attempts", sa.Integer(), nullable=False, comment="times its scorer started"),
        sa.Column(
            "lease_owner",
            sa.String(length=200),
            nullable=True,
            comment="the worker running its scorer",
        ),
        sa.Column("lease_epoch", sa.Integer(), nullable=False, comment="fencing token"),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when its scorer last started",
        ),
        sa.Column(
            "scored_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when it was scored or failed",
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "name"),
        comment="scores of runs: by their agent's scorers after they end, or given by a person",
    )
    op.create_index("ix_scores_status", "scores", ["status"], unique=False)
    op.execute(_RUN_SCORES)
    if op.get_bind().dialect.name == "postgresql":
        # A new table and view have no grants: give revision 0004's reader its SELECT.
        op.execute(
            "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
            "THEN GRANT SELECT ON scores, run_scores TO runner_reader; END IF; END $$"
        )


def downgrade() -> None:
    op.execute("DROP VIEW run_scores")
    op.drop_table("scores")  # its grant goes with it
