"""Revision 0024 indexes a limit's calls not settled (a partial index: the rows in flight,
never the minute's settled ones) and adds the tokens to the index of its minute; the
downgrade puts revision 0023's indexes back and keeps the rows."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy import Engine

from runner.sql.database import downgrade, upgrade

from .limit_tables import LIMITS, limit_reservations

_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
_UNSETTLED = "ix_limit_reservations_limit_unsettled"
_MINUTE_WAS = "ix_limit_reservations_limit_counted_from"
_MINUTE_IS = "ix_limit_reservations_limit_counted_from_tokens"
_limits = LIMITS
_rows = limit_reservations()


def _index_definition(engine: Engine, name: str) -> str | None:
    """The CREATE INDEX of index `name` as the database keeps it, or None."""
    if engine.dialect.name == "postgresql":
        query = "SELECT indexdef FROM pg_indexes WHERE indexname = :name"
    else:
        query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"
    with engine.connect() as connection:
        found = connection.execute(sa.text(query), {"name": name}).scalar()
    return None if found is None else str(found)


def test_revision_0024_indexes_the_calls_not_settled_and_the_minutes_tokens(engine: Engine) -> None:
    upgrade(engine, "0023")
    with engine.begin() as connection:
        connection.execute(sa.insert(_limits).values(name="m", updated_at=_AT))
        for row_id, settled in (("flying", False), ("done", True)):
            connection.execute(
                sa.insert(_rows).values(
                    id=row_id, limit_name="m", run_id="r", lease_epoch=1, tokens=10,
                    settled=settled, reserved_at=_AT, settled_at=_AT if settled else None,
                    counted_from=_AT,
                )
            )  # fmt: skip
    assert _index_definition(engine, _UNSETTLED) is None

    upgrade(engine, "0024")
    definition = _index_definition(engine, _UNSETTLED)
    assert definition is not None
    # Partial: on the limit's name, where the call is not settled.
    assert "(limit_name)" in definition
    postgres = engine.dialect.name == "postgresql"
    expected = "WHERE (settled = false)" if postgres else "WHERE settled = 0"
    assert definition.endswith(expected), definition
    minute = _index_definition(engine, _MINUTE_IS)
    assert minute is not None and "(limit_name, counted_from, tokens)" in minute, minute
    assert _index_definition(engine, _MINUTE_WAS) is None

    downgrade(engine, "0023")
    assert _index_definition(engine, _UNSETTLED) is None
    assert _index_definition(engine, _MINUTE_IS) is None
    was = _index_definition(engine, _MINUTE_WAS)
    assert was is not None and "(limit_name, counted_from)" in was, was
    with engine.connect() as connection:
        kept = connection.execute(sa.select(_rows.c.id).order_by(_rows.c.id)).scalars().all()
    assert kept == ["done", "flying"]
