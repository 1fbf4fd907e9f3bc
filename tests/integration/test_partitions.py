"""The journal's monthly partitions on PostgreSQL (revision 0022): `runner prune` drops a
whole month whose entries all belong to runs it deletes, and leaves a month that holds an
entry of a run it keeps (deleting the pruned runs' rows there one by one, as before)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from runner import Runner
from runner.history import History
from runner.sql.database import open_engine
from runner.sql.partitions import ensure_months, month_of, months, next_month
from runner.sql.retention import prune_expired
from tests.conftest import fresh_database

from .agents import SOLVER_REF

pytestmark = pytest.mark.postgres

SEPTEMBER, OCTOBER = datetime(2026, 9, 10, tzinfo=UTC), datetime(2026, 10, 10, tzinfo=UTC)


@pytest.fixture
def pg_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    for url in fresh_database(request, "postgres", tmp_path):
        engine = open_engine(url)
        try:
            with engine.begin() as connection:
                for name, first, after in (
                    ("entries_p202609", "2026-09-01", "2026-10-01"),
                    ("entries_p202610", "2026-10-01", "2026-11-01"),
                ):
                    connection.execute(
                        text(
                            f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF entries "
                            f"FOR VALUES FROM ('{first} 00:00+00') TO ('{after} 00:00+00')"
                        )
                    )
            yield url
        finally:
            with engine.begin() as connection:
                connection.execute(text("DROP TABLE IF EXISTS entries_p202609, entries_p202610"))
            engine.dispose()


def moved(url: str, run_id: str, at: datetime, *, finished: bool = True) -> None:
    """The run and its journal as if written (and finished) at `at`: its entries move to
    that month's partition."""
    engine = open_engine(url)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE entries SET created_at = :at WHERE run_id = :id"), {"at": at, "id": run_id}
        )
        connection.execute(
            text(
                "UPDATE runs SET created_at = :at, finished_at = :at, "
                "status = CASE WHEN :finished THEN status ELSE 'running' END WHERE id = :id"
            ),
            {"at": at, "id": run_id, "finished": finished},
        )
    engine.dispose()


def test_prune_drops_a_month_all_pruned_and_keeps_a_month_with_a_kept_run(pg_url: str) -> None:
    with Runner(pg_url) as runner:
        for run_id in ("sept", "oct", "live"):
            runner.run(SOLVER_REF, "2+3?", id=run_id)
    moved(pg_url, "sept", SEPTEMBER)
    moved(pg_url, "oct", OCTOBER)
    moved(pg_url, "live", OCTOBER, finished=False)  # October also holds a run that is kept
    with History(pg_url) as history:
        pruned = history.prune(datetime(2026, 11, 1, tzinfo=UTC))
        with history.engine.connect() as connection:
            left = set(months(connection))
            kept = connection.execute(text("SELECT DISTINCT run_id FROM entries")).scalars()
            kept_ids = set(kept)
    assert pruned.runs == 2
    assert pruned.partitions == {"entries_p202609": 4}  # the whole month, in one statement
    assert pruned.entries == 8  # September's 4 with the month, October's 4 row by row
    assert "entries_p202609" not in left and "entries_p202610" in left
    assert kept_ids == {"live"}


def test_a_retention_pass_makes_the_months_ahead(pg_url: str) -> None:
    now = datetime.now(UTC)
    ahead = next_month(next_month(month_of(now)))
    name = f"entries_p{ahead:%Y%m}"
    engine = open_engine(pg_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(f"DROP TABLE {name}"))  # empty: no entry is that new
        prune_expired(engine, now)
        with engine.connect() as connection:
            assert name in months(connection)
            assert ensure_months(connection, now) == []  # all there: nothing made
    finally:
        engine.dispose()
