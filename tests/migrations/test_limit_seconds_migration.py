"""Revision 0026 adds `limit_seconds`, a limit's settled calls summed by the second their
minutes start: on PostgreSQL filled from the calls already settled, then kept by triggers as
calls are written settled, settled, or settled again; on SQLite left empty. The downgrade
drops it and keeps the calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import Engine

from runner.sql.database import downgrade, upgrade

from .limit_tables import LIMITS, limit_reservations

_AT = datetime(2026, 12, 1, 9, 0, 5, 250_000, tzinfo=UTC)
_limits = LIMITS
_rows = limit_reservations()


def _call(row_id: str, tokens: int, settled_at: datetime | None) -> dict[str, object]:
    return {
        "id": row_id, "limit_name": "m", "run_id": "r", "lease_epoch": 1, "tokens": tokens,
        "settled": settled_at is not None, "reserved_at": _AT, "settled_at": settled_at,
        "counted_from": settled_at or _AT + timedelta(seconds=10),
    }  # fmt: skip


def _seconds(engine: Engine) -> list[tuple[datetime, int, int]]:
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT second, tokens, calls FROM limit_seconds ORDER BY second")
        ).all()
    return [(second.astimezone(UTC), int(tokens), int(calls)) for second, tokens, calls in rows]


def test_revision_0026_sums_settled_calls_by_the_second(engine: Engine) -> None:
    upgrade(engine, "0025")
    second = _AT.replace(microsecond=0)
    with engine.begin() as connection:
        connection.execute(sa.insert(_limits).values(name="m", updated_at=_AT))
        connection.execute(
            sa.insert(_rows),
            [
                _call("a", 10, _AT),
                _call("b", 20, second + timedelta(microseconds=999_999)),  # the same second
                _call("c", 5, second + timedelta(seconds=1)),  # the next one, exactly
                _call("flying", 100, None),  # not settled: not summed
            ],
        )

    upgrade(engine, "0026")
    postgres = engine.dialect.name == "postgresql"
    one = timedelta(seconds=1)
    assert _seconds(engine) == ([(second, 30, 2), (second + one, 5, 1)] if postgres else [])

    later = second + timedelta(seconds=3)
    with engine.begin() as connection:
        connection.execute(sa.insert(_rows).values(_call("d", 7, later)))  # written settled
        connection.execute(  # settled, then settled again (its usage corrected)
            sa.text(
                "UPDATE limit_reservations SET settled = true, tokens = 40, settled_at = :at, "
                "counted_from = :at WHERE id = 'flying'"
            ),
            {"at": later},
        )
        connection.execute(sa.text("UPDATE limit_reservations SET tokens = 41 WHERE id = 'flying'"))
    if postgres:
        assert _seconds(engine) == [(second, 30, 2), (second + one, 5, 1), (later, 48, 2)]

    downgrade(engine, "0025")
    assert "limit_seconds" not in sa.inspect(engine).get_table_names()
    with engine.connect() as connection:
        kept = connection.execute(sa.text("SELECT count(*) FROM limit_reservations")).scalar()
    assert kept == 5
