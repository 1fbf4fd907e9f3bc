"""The reads of `runner list` and `show` written once as plain SQL (runner.reads), on SQLite and
PostgreSQL: every value as SQLAlchemy's column types read it, on a connection beneath the
engine and on one opened without SQLAlchemy (runner.direct), and the command's output the
same on its fast path and on the full one (a Runner)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, func, select, text

from runner import Runner
from runner.cli import main
from runner.sql import plain_connection as direct
from runner.sql import reads
from runner.sql import runs as store
from runner.sql.reads import Reader
from runner.sql.schema import entries, runs
from runner.store.rows import RunRow, entry_of

from .listed_runs import IDS, fill


@pytest.fixture
def filled(db_url: str) -> str:
    fill(db_url)
    return db_url


@pytest.fixture
def plain(filled: str) -> Iterator[Reader]:
    reader = direct.open_reader(filled)
    assert reader is not None, "runner.direct did not open the test's database"
    with closing(reader):
        yield reader


def _same(read: Any, expected: Any) -> None:
    """Equal, of the same type, and for a datetime in the same zone (UTC)."""
    assert type(read) is type(expected), (read, expected)
    assert read == expected
    if isinstance(read, datetime):
        assert read.tzinfo is UTC and expected.tzinfo is UTC


def test_every_run_column_reads_as_sqlalchemy_reads_it(filled: str, plain: Reader) -> None:
    with Runner(filled) as runner, runner.engine.connect() as connection:
        core = {row.id: row for row in connection.execute(select(runs))}
        with store.plain_reading(runner.engine) as beneath:
            under_engine = beneath.rows(f"SELECT {', '.join(reads.RUN_FIELDS)} FROM runs")
    opened = plain.rows(f"SELECT {', '.join(reads.RUN_FIELDS)} FROM runs")
    assert sorted(core) == sorted(IDS)
    for read in (under_engine, opened):
        assert sorted(row["id"] for row in read) == sorted(IDS)
        for row in read:
            expected = core[row["id"]]._mapping
            for name in reads.RUN_FIELDS:
                _same(row[name], expected[name])
            assert RunRow.of(row) == RunRow.of(core[row["id"]])
    by_id = {row["id"]: RunRow.of(row) for row in opened}
    # The runs among some ids (a submission's check for ids taken): the same rows.
    with Runner(filled) as runner:
        assert store.existing_runs(runner.engine, [*IDS, "absent"]) == by_id
    # What the fixture holds, so that the comparison above compared something.
    assert by_id["done-json"].output == {"sum": 5, "unit": None, "exact": True}
    assert by_id["done-text"].output == "5"
    assert by_id["forked"].forked_from_id == "done-text"
    assert by_id["delayed"].not_before is not None and by_id["delayed"].priority == 5
    assert by_id["live"].deadline is not None and by_id["live"].cancel_requested is True
    assert by_id["waiting"].waiting_since is not None
    assert isinstance(by_id["done-text"].budgets, dict) and by_id["done-text"].budgets


def test_list_runs_filters_as_the_library_did(filled: str, plain: Reader) -> None:
    with Runner(filled) as runner:
        now = runner.now()
        for filters in (
            {},
            {"status": "running"},
            {"status": "finished", "stop_reason": "final"},
            {"release": "r1", "limit": 3},
            {"status": "running", "lease_expired_at": now},
            {"status": "running", "lease_live_at": now},
            {"owner_prefix": "elsewhere:"},
            {"owner_prefix": "elsewhere_"},  # `_` taken literally: no run
        ):
            with runner.engine.connect() as connection:
                query = select(runs).order_by(runs.c.created_at.desc(), runs.c.id.desc())
                query = query.limit(filters.get("limit", 20))
                for name in ("status", "stop_reason", "release"):
                    if name in filters:
                        query = query.where(runs.c[name] == filters[name])
                expiry = runs.c.lease_expires_at
                if "lease_expired_at" in filters:
                    query = query.where(expiry.is_(None) | (expiry < now))
                if "lease_live_at" in filters:
                    query = query.where(expiry >= now)
                if "owner_prefix" in filters:
                    query = query.where(
                        store.starts_with(runs.c.lease_owner, filters["owner_prefix"])
                    )
                expected = [RunRow.of(row) for row in connection.execute(query)]
            assert reads.list_runs(plain, **filters) == expected, filters
            assert store.list_runs(runner.engine, **filters) == expected, filters
    assert [r.id for r in reads.list_runs(plain, owner_prefix="elsewhere:")] == ["stalled-expired"]
    assert reads.list_runs(plain, owner_prefix="elsewhere_") == []


def test_last_entries_and_the_last_entry_read_as_before(filled: str, plain: Reader) -> None:
    with Runner(filled) as runner, runner.engine.connect() as connection:
        last = (
            select(entries.c.run_id, func.max(entries.c.seq).label("seq"))
            .group_by(entries.c.run_id)
            .subquery()
        )
        query = select(entries).join(
            last, (entries.c.run_id == last.c.run_id) & (entries.c.seq == last.c.seq)
        )
        core = {row.run_id: row for row in connection.execute(query)}
        counted = store.last_entries(runner.engine, IDS)
    found = reads.last_entries(plain, IDS)
    assert sorted(found) == sorted(core) == sorted(counted)
    assert "queued" not in found  # no journal yet
    for run_id, row in core.items():
        counters, at = found[run_id]
        assert (counters.steps, counters.tokens, counters.error_streak) == (
            row.steps, row.tokens, row.error_streak,
        )  # fmt: skip
        _same(counters.cost, row.cost)
        _same(at, row.created_at)
        assert counted[run_id] == found[run_id]
        entry, seq, written = reads.last_entry(plain, run_id) or (None, None, None)
        assert (entry, seq) == (entry_of(row), row.seq)
        _same(written, row.created_at)
    wait = reads.last_entry(plain, "waiting")
    assert wait is not None and wait[0].kind == "wait" and wait[0].args == {"amount": 250}
    assert reads.last_entry(plain, "queued") is None


def test_the_library_and_the_plain_connection_list_every_state_alike(
    filled: str, plain: Reader
) -> None:
    from runner.sql import run_states as listing

    with Runner(filled) as runner:
        for state in (None, "queued", "running", "stalled", "waiting", "finished"):
            now = listing.clock_now(plain)
            listed = listing.runs(plain, now, state=state)
            assert listed == runner.list(state=state), state
            # Every open call of each waiting run, read plainly and through the store alike;
            # Runner.waits names each run's first open call, as it always has.
            every = listing.waits(plain, listed)
            assert every == runner.store.waits(listed)
            assert {run_id: calls[0] for run_id, calls in every.items()} == runner.waits(listed)
        assert [r.id for r in runner.list(state="stalled")] == ["stalled-dead", "stalled-expired"]
        assert [r.id for r in runner.list(state="running")] == ["live"]
        assert [r.steps for r in runner.list(state="running")] == [2]  # the journal's count
        assert list(runner.waits(runner.list(state="waiting"))) == ["waiting"]


LISTINGS = [
    [],
    ["--json"],
    ["--status", "running"],
    ["--status", "stalled"],
    ["--status", "waiting"],
    ["--status", "waiting", "--json"],
    ["--status", "queued"],
    ["--tree"],
    ["--tree", "--json"],
    ["--status", "finished", "--stop-reason", "final"],
    ["--release", "r1", "--limit", "2"],
    ["--status", "stalled", "--json"],
]


SHOWINGS = [
    *(["show", run_id] for run_id in IDS),
    ["show", "done-j"],  # a prefix
    ["show", "waiting", "--json"],
    ["show", "live", "--json"],
    ["show", "done-json", "--full"],
    ["show", "live", "--tree"],
    ["show", "forked", "--tree", "--json"],
]


@pytest.mark.parametrize("args", [*(["list", *a] for a in LISTINGS), *SHOWINGS], ids=" ".join)
def test_list_and_show_print_the_same_on_the_fast_path_and_the_full_one(
    filled: str, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Reader | None] = []
    open_reader = direct.open_reader

    def watched(url: str | None) -> Reader | None:
        opened.append(open_reader(url))
        return opened[-1]

    monkeypatch.setattr(direct, "open_reader", watched)
    fast = CliRunner().invoke(main, [*args, "--db", filled])
    assert fast.exit_code == 0, fast.output
    assert len(opened) == 1 and opened[0] is not None  # it took the fast path
    monkeypatch.setattr(direct, "open_reader", lambda url: None)  # the full path: a Runner
    full = CliRunner().invoke(main, [*args, "--db", filled])
    assert full.exit_code == 0, full.output
    assert fast.output == full.output
    assert "no runs" not in fast.output and fast.output not in ("[]\n", "")


@pytest.mark.parametrize("args", [["show", "d"], ["show", "nothing"], ["show", " "]], ids=" ".join)
def test_show_refuses_alike_on_both_paths(
    filled: str, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = CliRunner().invoke(main, [*args, "--db", filled])
    monkeypatch.setattr(direct, "open_reader", lambda url: None)
    full = CliRunner().invoke(main, [*args, "--db", filled])
    assert (fast.exit_code, fast.output) == (full.exit_code, full.output)
    assert fast.exit_code in (1, 2) and fast.output.startswith("Error: ")


def test_a_driver_error_on_the_fast_path_is_reported_in_one_line(tmp_path: Path) -> None:
    # Once, not read again through a Runner: test_direct_open counts the connections.
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    fill(url)
    engine = create_engine(url)
    with engine.begin() as connection:  # a table the listing reads is gone
        connection.execute(text("DROP VIEW IF EXISTS run_summary"))
        connection.execute(text("ALTER TABLE entries RENAME TO entries_gone"))
    engine.dispose()
    done = CliRunner().invoke(main, ["list", "--db", url])
    assert done.exit_code == 1
    assert done.output.count("\n") == 1 and "entries" in done.output, done.output
