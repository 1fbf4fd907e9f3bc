"""limits: provider limits shared by every worker (tokens and requests per minute)

- the table `limits` (name, tokens_per_minute, requests_per_minute, concurrency,
  backoff_until, updated_at): a model deployment's limits, set with `runner limit set`;
  `backoff_until` is a provider's Retry-After, shared by every worker;
- the table `limit_reservations` (id, limit_name, run_id, lease_epoch, tokens, settled,
  reserved_at, settled_at): each model call charged to a limit in the last minute, its
  estimate while in flight and its reported usage once settled. An unsettled row counts only
  while the run's lease of `lease_epoch` lives: a crash leaks nothing past the lease;
- the table `limit_waiters` (limit_name, run_id, tokens, waiting_since): runs parked until a
  limit has room, oldest first.

New tables only: no existing row or view changes. The reader role of revision 0004 may
SELECT the three.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("limits", "limit_reservations", "limit_waiters")


def _counter() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


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
    op.create_table(
        "limits",
        sa.Column("name", sa.String(length=200), nullable=False, comment="e.g. openai/gpt-4.1"),
        sa.Column("tokens_per_minute", _counter(), nullable=True, comment="NULL: no token limit"),
        sa.Column(
            "requests_per_minute", sa.Integer(), nullable=True, comment="NULL: no request limit"
        ),
        sa.Column(
            "concurrency", sa.Integer(), nullable=True, comment="calls in flight at once; NULL: any"
        ),
        sa.Column(
            "backoff_until",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="a provider's Retry-After, shared: no call reserves before this",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="when the limit was last set",
        ),
        sa.PrimaryKeyConstraint("name"),
        comment="limits of model deployments, shared by every worker",
    )
    op.create_table(
        "limit_reservations",
        sa.Column("id", sa.String(length=32), nullable=False, comment="random"),
        sa.Column("limit_name", sa.String(length=200), nullable=False),
        sa.Column(
            "run_id", sa.String(length=32), nullable=False, comment="the run whose model call it is"
        ),
        sa.Column(
            "lease_epoch", sa.Integer(), nullable=False, comment="the lease that reserved it"
        ),
        sa.Column(
            "tokens", _counter(), nullable=False, comment="estimate until settled, then usage"
        ),
        sa.Column(
            "settled",
            sa.Boolean(),
            nullable=False,
            comment="the call ended: tokens are its usage",
        ),
        sa.Column(
            "reserved_at",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="charged to the minute from here",
        ),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["limit_name"], ["limits.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        comment="model calls charged to a limit in the last minute (older rows are deleted)",
    )
    op.create_index(
        "ix_limit_reservations_limit_reserved_at",
        "limit_reservations",
        ["limit_name", "reserved_at"],
        unique=False,
    )
    op.create_table(
        "limit_waiters",
        sa.Column("limit_name", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("tokens", _counter(), nullable=False, comment="the estimate it waits to reserve"),
        sa.Column(
            "waiting_since",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="its place in line",
        ),
        sa.ForeignKeyConstraint(["limit_name"], ["limits.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("limit_name", "run_id"),
        comment="runs parked until a limit has room for their next model call",
    )
    op.create_index(
        "ix_limit_waiters_limit_since",
        "limit_waiters",
        ["limit_name", "waiting_since"],
        unique=False,
    )
    for table in TABLES:
        _grant_reader(table, dialect)


def downgrade() -> None:
    # Their grants go with them.
    op.drop_table("limit_waiters")
    op.drop_table("limit_reservations")
    op.drop_table("limits")
