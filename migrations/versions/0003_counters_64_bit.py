"""64-bit counters

Steps and tokens are counted with 64-bit integers on PostgreSQL, as SQLite always did: a
model may report any usage (seed 000 just adds it), and a 32-bit `integer` column refused a
usage of 2**31 with "integer out of range", which crashed the run on its write. The store
also saturates counters at the largest 64-bit value, so no sum can overflow the column.

The views read these columns, and PostgreSQL alters no column a view reads: they are
dropped and created again from revision 0002's own SQL.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNTERS = {"runs": ("steps", "tokens"), "entries": ("steps", "tokens", "usage_tokens")}


def _views_of_0002(dialect: str) -> list[str]:
    # Alembic loads revisions by path, not as a package: load 0002 the same way.
    path = Path(__file__).with_name("0002_history_views_and_indexes.py")
    spec = importlib.util.spec_from_file_location("runner_revision_0002", path)
    assert spec is not None and spec.loader is not None
    views = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(views)
    return list(views._views(dialect))


def _retype(to: type[sa.types.TypeEngine[int]], was: type[sa.types.TypeEngine[int]]) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite's INTEGER is 64 bits already; the declared schema keeps it INTEGER
    op.execute("DROP VIEW IF EXISTS tool_calls")
    op.execute("DROP VIEW IF EXISTS run_summary")
    for table, columns in COUNTERS.items():
        for column in columns:
            op.alter_column(table, column, type_=to(), existing_type=was(), existing_nullable=False)
    for statement in _views_of_0002("postgresql"):
        op.execute(statement)


def upgrade() -> None:
    _retype(sa.BigInteger, sa.Integer)


def downgrade() -> None:
    _retype(sa.Integer, sa.BigInteger)
