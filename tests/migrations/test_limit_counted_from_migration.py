"""Revision 0023 gives each stored charge of a limit where its minute starts (`counted_from`:
its reservation plus the grace while not settled, then its settle), and the downgrade takes
the column away and keeps the rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import Engine

from runner.core.limits import UNSETTLED_GRACE_SECONDS
from runner.sql.database import downgrade, upgrade

from .limit_tables import LIMITS, limit_reservations

_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
_limits = LIMITS
_rows = limit_reservations(counted_from=False)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def test_revision_0023_gives_each_charge_where_its_minute_starts(engine: Engine) -> None:
    upgrade(engine, "0022")
    late = _AT + timedelta(seconds=100)  # a call that ran past its minute
    with engine.begin() as connection:
        connection.execute(sa.insert(_limits).values(name="m", updated_at=_AT))
        for row_id, settled, settled_at in (("flying", False, None), ("long", True, late)):
            connection.execute(
                sa.insert(_rows).values(
                    id=row_id, limit_name="m", run_id="r", lease_epoch=1, tokens=10,
                    settled=settled, reserved_at=_AT, settled_at=settled_at,
                )
            )  # fmt: skip

    upgrade(engine, "0023")
    with engine.connect() as connection:
        found = connection.execute(
            sa.text("SELECT id, counted_from FROM limit_reservations ORDER BY id")
        ).all()
    grace = timedelta(seconds=UNSETTLED_GRACE_SECONDS)
    assert [(row_id, _utc(sa_value(at))) for row_id, at in found] == [
        ("flying", _AT + grace),
        ("long", late),
    ]

    downgrade(engine, "0022")
    with engine.connect() as connection:
        kept = connection.execute(sa.select(_rows.c.id).order_by(_rows.c.id)).scalars().all()
    assert kept == ["flying", "long"]


def sa_value(value: object) -> datetime:
    """A timestamp as read by plain SQL: PostgreSQL's datetime, SQLite's text."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
