"""limit changes: a count of the transactions that reserved from a limit or put a run in its
line, so that PostgreSQL can reserve a call in the statement of a journal write

- `limits.changes`: bumped (on PostgreSQL) by every transaction that reserves from the limit,
  takes a grant of it or parks a run in its line, as it takes the limit's row lock. A
  reservation made in one statement (runner.sql.limit_rides) reads the minute as of the
  statement's start, before it locks the row: it reserves only if the row's count is still
  the one it read, that is if nobody reserved between its read and its lock.

Downgrade drops the column.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COMMENT = "bumped by every reservation, grant and park under the row's lock (PostgreSQL)"


def upgrade() -> None:
    op.add_column(
        "limits",
        sa.Column(
            "changes",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            server_default="0",
            comment=_COMMENT,
        ),
    )


def downgrade() -> None:
    # SQLite drops a column by copying its (small) table.
    with op.batch_alter_table("limits") as batch:
        batch.drop_column("changes")
