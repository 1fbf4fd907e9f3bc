"""runs and entries

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "runs",
        sa.Column(
            "id", sa.String(length=32), nullable=False, comment="short, time-sortable run id"
        ),
        sa.Column(
            "agent",
            sa.Text(),
            nullable=True,
            comment="agent reference (module:attr, path.py:attr)",
        ),
        sa.Column("agent_name", sa.String(length=200), nullable=True, comment="the Agent's name"),
        sa.Column(
            "release", sa.String(length=200), nullable=True, comment="the Agent's release label"
        ),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column(
            "budgets",
            sa.JSON(),
            nullable=False,
            comment="the run's budgets, as JSON",
        ),
        sa.Column(
            "status", sa.String(length=16), nullable=False, comment="queued, running or finished"
        ),
        sa.Column(
            "stop_reason", sa.String(length=32), nullable=True, comment="why a finished run stopped"
        ),
        sa.Column(
            "output",
            sa.Text(),
            nullable=True,
            comment="the answer (JSON text if output_format=json)",
        ),
        sa.Column("output_format", sa.String(length=8), nullable=True, comment="text or json"),
        sa.Column(
            "error", sa.Text(), nullable=True, comment="the model's error on model_error, etc."
        ),
        sa.Column("wrapped_up", sa.Boolean(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False, comment="steps taken (final value)"),
        sa.Column("tokens", sa.Integer(), nullable=False, comment="tokens spent (final value)"),
        sa.Column("cost", sa.Float(), nullable=False, comment="cost spent (final value)"),
        sa.Column("resumes", sa.Integer(), nullable=False, comment="takeovers after a crash"),
        sa.Column("stalled_resumes", sa.Integer(), nullable=False, comment="in a row, no progress"),
        sa.Column("progress_seq", sa.Integer(), nullable=False, comment="entries at last claim"),
        sa.Column(
            "deadline", sa.DateTime(timezone=True), nullable=True, comment="wall-clock limit"
        ),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column(
            "lease_owner",
            sa.String(length=200),
            nullable=True,
            comment="host:pid:start of the worker",
        ),
        sa.Column("lease_epoch", sa.Integer(), nullable=False, comment="fencing token"),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "leased_at", sa.DateTime(timezone=True), nullable=True, comment="when the owner took it"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        comment="one row per run",
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_created_at", ["created_at"], unique=False)
        batch_op.create_index("ix_runs_status_lease", ["status", "lease_expires_at"], unique=False)

    op.create_table(
        "entries",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False, comment="0, 1, 2, ..."),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column(
            "kind",
            sa.String(length=16),
            nullable=False,
            comment="task/action/observation/final/...",
        ),
        sa.Column(
            "role",
            sa.String(length=16),
            nullable=True,
            comment="user/assistant/tool; NULL if not shown",
        ),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("content_format", sa.String(length=8), nullable=False, comment="text or json"),
        sa.Column(
            "action_type", sa.String(length=8), nullable=True, comment="final, tool or invalid"
        ),
        sa.Column("tool", sa.String(length=200), nullable=True),
        sa.Column(
            "args",
            sa.JSON(),
            nullable=True,
        ),
        sa.Column("is_error", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True, comment="why a model output was invalid"),
        sa.Column("idempotency_key", sa.String(length=80), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("usage_tokens", sa.Integer(), nullable=False, comment="this model call's"),
        sa.Column("usage_cost", sa.Float(), nullable=False, comment="this model call's"),
        sa.Column(
            "steps", sa.Integer(), nullable=False, comment="the run's steps after this entry"
        ),
        sa.Column(
            "tokens", sa.Integer(), nullable=False, comment="the run's tokens after this entry"
        ),
        sa.Column("cost", sa.Float(), nullable=False, comment="the run's cost after this entry"),
        sa.Column("error_streak", sa.Integer(), nullable=False, comment="failed steps in a row"),
        sa.Column(
            "lease_epoch", sa.Integer(), nullable=False, comment="the lease that wrote this entry"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "seq"),
        comment="the journal: one row per transcript entry, append-only",
    )


def downgrade() -> None:

    op.drop_table("entries")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_status_lease")
        batch_op.drop_index("ix_runs_created_at")

    op.drop_table("runs")
