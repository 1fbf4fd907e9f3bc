"""limit counted_from: a limit's charge found by where its minute starts, not by its reservation

- `limit_reservations.counted_from`: where the call's minute starts (runner.core.limits.
  counted_from): `reserved_at` plus 10 s while the call is not settled, then `settled_at`.
  Each row of the table is given it (the table holds a few minutes of calls).
- The index `ix_limit_reservations_limit_reserved_at` becomes
  `ix_limit_reservations_limit_counted_from` (limit_name, counted_from): the reads of a
  limit's minute were ranges of `reserved_at` and missed a call that ran for longer than a
  minute, whose usage counts from its settle; they are now ranges of `counted_from`.
- `reserved_at`'s comment says what it holds: when the call was reserved.

Downgrade drops the column and puts the old index back.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# runner.core.limits.UNSETTLED_GRACE_SECONDS, as of this revision.
_UNSETTLED_GRACE = timedelta(seconds=10)
_COMMENT = "its minute starts here: reserved_at plus 10 s until settled, then settled_at"
_RESERVED_AT_WAS = "charged to the minute from here"
_RESERVED_AT_IS = "when the call was reserved"

_rows = sa.table(
    "limit_reservations",
    sa.column("id", sa.String(32)),
    sa.column("settled", sa.Boolean()),
    sa.column("reserved_at", sa.DateTime(timezone=True)),
    sa.column("settled_at", sa.DateTime(timezone=True)),
    sa.column("counted_from", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    bind = op.get_bind()
    op.add_column(
        "limit_reservations",
        sa.Column("counted_from", sa.DateTime(timezone=True), nullable=True, comment=_COMMENT),
    )
    found = bind.execute(
        sa.select(_rows.c.id, _rows.c.settled, _rows.c.reserved_at, _rows.c.settled_at)
    ).all()
    counted = [
        {
            "row_id": row.id,
            "counted_from": (row.settled_at or row.reserved_at)
            if row.settled
            else row.reserved_at + _UNSETTLED_GRACE,
        }
        for row in found
    ]
    if counted:
        bind.execute(
            _rows.update()
            .where(_rows.c.id == sa.bindparam("row_id"))
            .values(counted_from=sa.bindparam("counted_from")),
            counted,
        )
    # SQLite cannot make a column NOT NULL in place: batch mode copies its (small) table.
    with op.batch_alter_table("limit_reservations") as batch:
        batch.alter_column(
            "counted_from",
            existing_type=sa.DateTime(timezone=True),
            existing_comment=_COMMENT,
            nullable=False,
        )
        batch.alter_column(
            "reserved_at",
            existing_type=sa.DateTime(timezone=True),
            existing_nullable=False,
            comment=_RESERVED_AT_IS,
            existing_comment=_RESERVED_AT_WAS,
        )
        batch.drop_index("ix_limit_reservations_limit_reserved_at")
        batch.create_index(
            "ix_limit_reservations_limit_counted_from", ["limit_name", "counted_from"]
        )


def downgrade() -> None:
    with op.batch_alter_table("limit_reservations") as batch:
        batch.drop_index("ix_limit_reservations_limit_counted_from")
        batch.create_index("ix_limit_reservations_limit_reserved_at", ["limit_name", "reserved_at"])
        batch.alter_column(
            "reserved_at",
            existing_type=sa.DateTime(timezone=True),
            existing_nullable=False,
            comment=_RESERVED_AT_WAS,
            existing_comment=_RESERVED_AT_IS,
        )
        batch.drop_column("counted_from")
