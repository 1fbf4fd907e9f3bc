"""tree spend: what the runs below a run spent, charged to it as they spend it

A sub-agent's child run charges everything it spends (steps, tokens, cost) to each run
above it, up to the root, in the same transaction as the journal entry that spent it, so
that before each model call every run of a tree can check every ancestor's budget against
what the ancestor and all the runs below it spent. Three columns on `runs`, added last:
`below_steps`, `below_tokens` and `below_cost` (0 for a run with no children, and for every
run stored before this revision). A run's own spend stays in `steps`, `tokens` and `cost`
(which a parked parent's row now holds as of its park): the tree's whole spend is a root's
own plus its `below_*`.

Plain ALTER TABLE ADD COLUMN with a server default on both databases (no rebuild of `runs`
on SQLite, which would cascade to the journal: see revision 0006).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTER = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column(
            "below_steps",
            _COUNTER,
            nullable=False,
            server_default="0",
            comment="steps the runs below this one spent, charged as spent",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "below_tokens",
            _COUNTER,
            nullable=False,
            server_default="0",
            comment="tokens the runs below this one spent, charged as spent",
        ),
    )
    op.add_column(
        "runs",
        sa.Column(
            "below_cost",
            sa.Float(),
            nullable=False,
            server_default="0",
            comment="cost the runs below this one spent, charged as spent",
        ),
    )


def downgrade() -> None:
    for name in ("below_cost", "below_tokens", "below_steps"):
        op.drop_column("runs", name)
