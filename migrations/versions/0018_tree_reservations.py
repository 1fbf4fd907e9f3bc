"""tree_reservations: a tree's budget held before its model calls

- the table `tree_reservations` (id, root_id, run_id, lease_epoch, step, above, tokens,
  reserved_at): each model call of a child run in flight, its estimate held against the
  budgets of the runs above it (`above`, nearest first) from before the call until the
  entry recording its output is written (which charges the real usage up the tree). A row
  counts while its run is `running` under the lease of `lease_epoch` and its journal has
  not recorded step `step`: a dead worker's row counts until its run is taken over (its
  call's spend can no longer be written) and never past it.

A new table only: no existing row or view changes. No foreign key to `runs`: the rows are
short-lived and `runner prune` need not wait for them. The reader role of revision 0004 may
SELECT the table.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tree_reservations",
        sa.Column("id", sa.String(length=32), nullable=False, comment="random"),
        sa.Column("root_id", sa.String(length=32), nullable=False, comment="the tree's root"),
        sa.Column(
            "run_id", sa.String(length=32), nullable=False, comment="the run whose model call it is"
        ),
        sa.Column(
            "lease_epoch", sa.Integer(), nullable=False, comment="the lease that reserved it"
        ),
        sa.Column("step", sa.Integer(), nullable=False, comment="the step whose model call it is"),
        sa.Column(
            "above",
            sa.JSON(none_as_null=True),
            nullable=False,
            comment="the ids of the runs above, nearest first",
        ),
        sa.Column(
            "tokens",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            comment="the call's estimate",
        ),
        sa.Column("reserved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        comment="model calls of child runs in flight, held against their ancestors' budgets",
    )
    op.create_index("ix_tree_reservations_root_id", "tree_reservations", ["root_id"], unique=False)
    op.create_index(
        "ix_tree_reservations_reserved_at", "tree_reservations", ["reserved_at"], unique=False
    )
    if op.get_bind().dialect.name == "postgresql":
        # A new table has no grants: give revision 0004's reader its SELECT on it.
        op.execute(
            "DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'runner_reader') "
            "THEN GRANT SELECT ON tree_reservations TO runner_reader; END IF; END $$"
        )


def downgrade() -> None:
    op.drop_table("tree_reservations")  # its grant goes with it
