"""A timestamp as the journal binds it on SQLite: made cheaper, the same text to the byte
(runner.sql.schema; None's binding is in tests/integration/test_sqlite_none.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import DateTime
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

from runner.sql.schema import Timestamp

SQLITE = sqlite_dialect.dialect()
PG = postgresql.dialect()
# SQLAlchemy's own processor for the column under the decorator: the text it would write.
SQLALCHEMY = DateTime(timezone=True).dialect_impl(SQLITE).bind_processor(SQLITE)

VALUES = [
    datetime(2026, 12, 7, 12, 0, 0, 0, UTC),  # no microseconds: isoformat would drop them
    datetime(2026, 12, 7, 23, 59, 59, 999999, UTC),
    datetime(1, 1, 1, 0, 0, 0, 1, UTC),
    datetime(999, 9, 9, 9, 9, 9, 90, UTC),  # a year of three digits, padded to four
    datetime(9999, 12, 31, 23, 59, 59, 0, UTC),
    datetime(2026, 3, 29, 2, 30, 0, 5, timezone(timedelta(hours=5, minutes=30))),
    datetime(2026, 3, 29, 2, 30, 0, 5, timezone(timedelta(hours=-11))),
]


@pytest.mark.parametrize("value", VALUES, ids=str)
def test_a_timestamp_is_written_as_sqlalchemy_would_write_it(value: datetime) -> None:
    process = Timestamp.dialect_impl(SQLITE).bind_processor(SQLITE)
    assert process is not None and SQLALCHEMY is not None
    expected = SQLALCHEMY(value.astimezone(UTC))
    assert process(value) == expected
    assert process(None) is None


def test_a_naive_timestamp_is_refused_on_the_quick_path_too() -> None:
    process = Timestamp.dialect_impl(SQLITE).bind_processor(SQLITE)
    assert process is not None
    with pytest.raises(ValueError, match="naive datetime"):
        process(datetime(2026, 12, 7, 12, 0, 0))


def test_a_sqlite_storage_format_of_its_own_keeps_sqlalchemys_processor() -> None:
    # Only SQLite's default DATETIME text takes the quick path: another dialect, or a type
    # whose text differs, keeps the general one (it is asked what it would write).
    processor = Timestamp.dialect_impl(PG).bind_processor(PG)
    assert processor is None or processor.__name__ != "_sqlite_text"
    quick = Timestamp.dialect_impl(SQLITE).bind_processor(SQLITE)
    assert quick is not None and quick.__name__ == "_sqlite_text"


def test_timestamps_in_turn_each_keep_their_own_second() -> None:
    # The text up to the second is kept from the last value: the same second, the next,
    # and back again each come out as SQLAlchemy's.
    process = Timestamp.dialect_impl(SQLITE).bind_processor(SQLITE)
    assert process is not None and SQLALCHEMY is not None
    start = datetime(2026, 12, 7, 12, 59, 59, 999998, UTC)
    for micros in (0, 1, 2, 3, 1, 0, 5_000_000, 0, 60_000_001):
        value = start + timedelta(microseconds=micros)
        assert process(value) == SQLALCHEMY(value)
