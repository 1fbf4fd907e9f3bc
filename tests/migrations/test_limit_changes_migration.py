"""Revision 0025 adds `limits.changes`, the count a reservation in a journal write's one
statement checks (runner.sql.reserving): every limit kept starts at 0; the downgrade drops
the column and keeps the limits."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy import Engine

from runner.sql.database import downgrade, upgrade

_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
_limits = sa.table(
    "limits",
    sa.column("name", sa.String()),
    sa.column("requests_per_minute", sa.Integer()),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)


def _columns(engine: Engine) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns("limits")}


def test_revision_0025_counts_a_limit_s_changes_from_0(engine: Engine) -> None:
    upgrade(engine, "0024")
    with engine.begin() as connection:
        connection.execute(
            sa.insert(_limits).values(name="m", requests_per_minute=5, updated_at=_AT)
        )
    assert "changes" not in _columns(engine)

    upgrade(engine, "0025")
    with engine.begin() as connection:
        kept = connection.execute(sa.text("SELECT name, changes FROM limits")).all()
        assert [tuple(row) for row in kept] == [("m", 0)]
        # A limit set afterwards starts at 0 too, and the count goes up.
        connection.execute(sa.insert(_limits).values(name="n", updated_at=_AT))
        connection.execute(sa.text("UPDATE limits SET changes = changes + 1 WHERE name = 'n'"))
        counted = connection.execute(sa.text("SELECT name, changes FROM limits ORDER BY name"))
        assert [tuple(row) for row in counted] == [("m", 0), ("n", 1)]

    downgrade(engine, "0024")
    assert "changes" not in _columns(engine)
    with engine.connect() as connection:
        names = connection.execute(sa.text("SELECT name, requests_per_minute FROM limits"))
        assert sorted(tuple(row) for row in names) == [("m", 5), ("n", None)]
