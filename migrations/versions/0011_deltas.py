"""deltas: pieces of model responses in flight, for followers of a run

- the table `deltas` (id, run_id, step, ordinal, part, call_index, tool, text, created_at):
  a worker whose model streams writes each piece of the response here (in short
  transactions of their own, at most one every 50 ms), and deletes the call's rows once
  its action is journaled; `Runner.events(..., deltas=True)` and `runner tail --follow`
  read them after a cursor, the id. Rows a crash leaves are deleted when a worker takes
  the run up again, or after ten minutes by any worker writing deltas.

No foreign key to `runs`: a row lives seconds, and `runner prune` need not wait for them.
The reader role of revision 0004 may SELECT the table.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "deltas",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
            comment="a follower's cursor: grows with each delta written, never reused",
        ),
        sa.Column(
            "run_id",
            sa.String(length=32),
            nullable=False,
            comment="the run whose model call streams",
        ),
        sa.Column("step", sa.Integer(), nullable=False, comment="the step whose model call it is"),
        sa.Column(
            "ordinal",
            sa.Integer(),
            nullable=False,
            comment=(
                "its place in the call's response, from 0 (0 begins the step's response afresh)"
            ),
        ),
        sa.Column(
            "part",
            sa.String(length=16),
            nullable=False,
            comment="text: the model's text; arguments: a piece of a tool call's arguments (JSON)",
        ),
        sa.Column(
            "call_index",
            sa.Integer(),
            nullable=False,
            comment="for arguments: which tool call of the response, from 0",
        ),
        sa.Column(
            "tool", sa.Text(), nullable=True, comment="for arguments: the tool's name, once known"
        ),
        sa.Column("text", sa.Text(), nullable=False, comment="the piece, as the provider sent it"),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="when the worker wrote it",
        ),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
        comment="pieces of model responses in flight (ephemeral: deleted once journaled)",
    )
    op.create_index("ix_deltas_run_id_id", "deltas", ["run_id", "id"], unique=False)
    op.create_index("ix_deltas_created_at", "deltas", ["created_at"], unique=False)
    if dialect == "postgresql":
        # A new table has no grants: give revision 0004's reader its SELECT on it.
        op.execute(
            "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
            "THEN GRANT SELECT ON deltas TO runner_reader; END IF; END $$"
        )


def downgrade() -> None:
    op.drop_table("deltas")  # its indexes and grants go with it
