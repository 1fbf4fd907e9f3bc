"""Revision 0022 (the journal partitioned by month on PostgreSQL) carries a populated 0021
database forward: every entry of every month reads back the same, each month in its own
partition, the views give what they gave, and a run goes on being written; downgrade puts
the rows back in one plain table. SQLite is unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, MetaData, Table, insert, text

from runner import Agent, Runner
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.sql.database import downgrade, upgrade
from runner.store.rows import entry_row, new_run

# Three months apart: each month's entries go to its own partition.
MONTHS = [datetime(2026, 9, 14, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC),
          datetime(2026, 12, 1, tzinfo=UTC)]  # fmt: skip


def populate_at_0021(engine: Engine) -> None:
    runs = Table("runs", MetaData(), autoload_with=engine)
    entries = Table("entries", MetaData(), autoload_with=engine)
    with engine.begin() as connection:
        for n, at in enumerate(MONTHS):
            run = new_run(
                run_id=f"m{n}", agent=None, agent_name="a", release="r", task="t",
                budgets={}, at=at,
            )  # fmt: skip
            connection.execute(insert(runs).values(**{k: v for k, v in run.items() if k in runs.c}))
            for seq in range(3):
                entry = Entry(EntryKind.TASK, 0, Counters(), content=f"{n}.{seq}")
                row = entry_row(f"m{n}", seq, 1, entry, at + timedelta(minutes=seq))
                connection.execute(insert(entries).values(**row))


def journal(engine: Engine) -> list[tuple[str, int, str, datetime]]:
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT run_id, seq, content, created_at FROM entries ORDER BY run_id, seq")
        )
        return [tuple(row) for row in rows]  # type: ignore[misc]


def partitions(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'entries'::regclass"
            )
        ).scalars()
        return {
            name: connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
            for name in found
        }


def test_a_populated_journal_is_partitioned_by_month_and_back(engine: Engine) -> None:
    upgrade(engine, "0021")
    populate_at_0021(engine)
    before = journal(engine)
    with engine.connect() as connection:
        summary = connection.execute(text("SELECT id, steps FROM run_summary ORDER BY id")).all()
    upgrade(engine)
    assert journal(engine) == before
    if engine.dialect.name == "postgresql":
        held = partitions(engine)
        assert {held["entries_p202609"], held["entries_p202610"], held["entries_p202612"]} == {3}
        assert held["entries_p202611"] == 0 and held["entries_default"] == 0
    with engine.connect() as connection:
        assert (
            connection.execute(text("SELECT id, steps FROM run_summary ORDER BY id")).all()
            == summary
        )
    url = engine.url.render_as_string(hide_password=False)
    with Runner(url) as runner:
        runner.run(Agent(lambda transcript: {"type": "final", "content": "new"}), "t", id="new")
        assert runner.get("new").output == "new"
    downgrade(engine, "0021")
    if engine.dialect.name == "postgresql":
        assert partitions(engine) == {}
    assert len(journal(engine)) == len(before) + 2
    upgrade(engine)
    assert len(journal(engine)) == len(before) + 2
