"""messages: an inbox per run, drained into its journal at the step boundary

- the table `messages` (run_id, number, idempotency_key, body, sent_at, delivered_seq):
  every message sent to a run (`runner send`, `Runner.send`), numbered per run in the
  order it was sent. `(run_id, idempotency_key)` is unique: the same key twice is one
  message. `delivered_seq` is NULL until the worker executing the run journals it, then
  the `seq` of its `message` entry in `entries` (written in the same transaction);
- `runs.undelivered_messages` (integer, default 0): how many of the run's messages are not
  in its journal yet. A sender adds one with its message; the worker's delivery sets it
  back to 0. Every journal write reads it back with the cancel flag, so a worker learns of
  a message with no query of its own.

Messages are journaled as entries of kind `message` (role `user`): no view changes, and a
run that is sent nothing writes exactly what it wrote before. The reader role of revision
0004 may SELECT the new table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
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
    # Plain ALTER TABLE with a server default (see revision 0008: a batch rebuild of runs
    # on SQLite would cascade its implicit DELETE to every journal entry).
    op.add_column(
        "runs",
        sa.Column(
            "undelivered_messages",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="messages sent to the run and not in its journal yet",
        ),
    )
    op.create_table(
        "messages",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column(
            "number", sa.Integer(), nullable=False, comment="1, 2, 3, ...: the order of sending"
        ),
        sa.Column(
            "idempotency_key",
            sa.String(length=80),
            nullable=False,
            comment="the sender's key: the same key twice is one message",
        ),
        sa.Column("body", sa.Text(), nullable=False, comment="what the model is shown"),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "delivered_seq",
            sa.Integer(),
            nullable=True,
            comment="the seq of its entry in the run's journal; NULL: not delivered yet",
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "number"),
        sa.UniqueConstraint("run_id", "idempotency_key", name="uq_messages_run_id_key"),
        comment="messages sent to runs, each journaled once as a user turn",
    )
    _grant_reader("messages", dialect)


def downgrade() -> None:
    op.drop_table("messages")  # its grants go with it
    # DROP COLUMN, not a batch rebuild (SQLite 3.35 or later): see revision 0006.
    op.drop_column("runs", "undelivered_messages")
