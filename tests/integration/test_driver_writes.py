"""The journal's writes on the driver's own cursor (runner.driver) keep what SQLAlchemy's
execute gave them: errors raised as SQLAlchemy's, a lost connection reconnected, a fenced-out
write leaving nothing behind, statements rendered once per dialect whatever the connection,
and, on PostgreSQL, a one-statement write that is its own transaction."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Integer, bindparam, event, select
from sqlalchemy.exc import IntegrityError

from runner import Runner
from runner.core.clock import utc_now
from runner.core.counters import Counters
from runner.core.journal import Stop
from runner.core.stop_reasons import StopReason
from runner.errors import LeaseLost
from runner.sql import driver, fenced_inserts, fencing, leases, write_alone
from runner.sql import runs as store
from runner.sql.backend import backend_for
from runner.sql.database import open_engine
from runner.sql.journal import SqlJournal
from runner.sql.schema import entries, runs
from runner.sql.writer import Writer
from runner.store.payloads import PLAIN
from runner.store.rows import entry_row, entry_values
from runner.store.rules import Claim

from .support import entry_rows, observation, task_entry, tool_action


def claimed(runner: Runner, run_id: str) -> Claim:
    assert store.create_run(
        runner.engine,
        run_id=run_id,
        agent=None,
        agent_name=None,
        release=None,
        task="t",
        budgets={},
    )
    return leases.claim_run(runner.engine, run_id, owner="w:1:1", lease_seconds=60, max_resumes=3)


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    with Runner(db_url) as opened:
        yield opened


def stored(runner: Runner, run_id: str) -> tuple[int, int]:
    """The steps and tokens of the run's own row (not its journal's, as `Runner.row`)."""
    with runner.engine.connect() as connection:
        query = select(runs.c.steps, runs.c.tokens).where(runs.c.id == run_id)
        steps, tokens = connection.execute(query).one()
    return steps, tokens


def in_transaction(connection: Connection) -> bool:
    """Whether the driver connection beneath `connection` has a transaction open."""
    raw: Any = connection.connection.dbapi_connection
    if connection.dialect.name == "sqlite":
        return bool(raw.in_transaction)
    return int(raw.info.transaction_status) != 0  # psycopg: 0 is IDLE


def test_the_private_sqlalchemy_methods_it_relies_on_are_there() -> None:
    # runner.driver runs its statements through these (SQLAlchemy's own path for the
    # statements it runs outside an execution context): an upgrade that drops one must
    # fail here, by name, not somewhere in a run.
    for name in ("_cursor_execute", "_commit_impl", "_rollback_impl", "_handle_dbapi_exception"):
        assert callable(getattr(Connection, name, None)), name


def test_a_duplicate_entry_is_sqlalchemys_integrity_error_and_leaves_no_transaction(
    runner: Runner,
) -> None:
    claim = claimed(runner, "dup")
    with runner.engine.connect() as connection:
        fencing.append_entry(connection, "dup", claim.epoch, 0, task_entry("t"), None, 60)
        with pytest.raises(IntegrityError):  # SqlJournal's retry tells a lost answer by it
            fencing.append_entry(connection, "dup", claim.epoch, 0, task_entry("t"), None, 60)
        assert not in_transaction(connection)
        # The connection goes on writing.
        action = tool_action("dup", 1, "add", {"a": 1}, Counters())
        fencing.append_entry(connection, "dup", claim.epoch, 1, action, None, 60)
    assert [r["seq"] for r in entry_rows(runner.engine, "dup")] == [0, 1]


def test_a_fenced_out_write_writes_nothing_and_leaves_no_transaction(runner: Runner) -> None:
    claim = claimed(runner, "fenced")
    with runner.engine.connect() as connection:
        fencing.append_entry(connection, "fenced", claim.epoch, 0, task_entry("t"), None, 60)
        action = tool_action("fenced", 1, "add", {"a": 1}, Counters())
        with pytest.raises(LeaseLost):
            fencing.append_entry(connection, "fenced", claim.epoch + 1, 1, action, None, 60)
        assert not in_transaction(connection)
    assert [r["seq"] for r in entry_rows(runner.engine, "fenced")] == [0]


def test_a_write_after_its_connection_was_invalidated_reconnects(db_url: str) -> None:
    # A pool of one: the connection invalidated is the very one the journal's next write
    # checks out (a run holds none between writes).
    with Runner(db_url, connections=1) as runner:
        claim = claimed(runner, "again")
        journal = SqlJournal(runner.engine, claim, lease_seconds=60)
        journal.append(task_entry("t"))
        statement = fenced_inserts.fenced_insert(runner.engine.dialect, 1)
        with runner.engine.connect() as connection:
            before = connection.connection.dbapi_connection
            connection.invalidate()  # as SQLAlchemy does when it sees the server gone
        action = tool_action("again", 1, "add", {"a": 1}, Counters(steps=1))
        journal.append(action)
        journal.append(observation(action, "3"))
        with runner.engine.connect() as connection:
            after = connection.connection.dbapi_connection
        # A new driver connection, and the statement rendered once is still the one used.
        assert after is not before
        assert fenced_inserts.fenced_insert(runner.engine.dialect, 1) is statement
        assert [r["kind"] for r in entry_rows(runner.engine, "again")] == [
            "task",
            "action",
            "observation",
        ]


def test_statements_are_rendered_once_per_dialect() -> None:
    with Runner("sqlite://") as first, Runner("sqlite://") as second:
        built: list[int] = []

        def build() -> Any:
            built.append(1)
            return entries.select()

        one = driver.prepared(first.engine.dialect, "test-select", build)
        again = driver.prepared(first.engine.dialect, "test-select", build)
        other = driver.prepared(second.engine.dialect, "test-select", build)
    assert one is again and other is not one
    assert len(built) == 2  # once for each engine's dialect


def test_listeners_hear_every_statement_and_commit_and_silence_costs_nothing_of_them(
    runner: Runner,
) -> None:
    claim = claimed(runner, "heard")
    statements: list[str] = []
    commits: list[int] = []

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        statements.append(statement)

    def on_commit(_conn: Any) -> None:
        commits.append(1)

    with runner.engine.connect() as connection:
        fencing.append_entry(connection, "heard", claim.epoch, 0, task_entry("t"), None, 60)
        assert statements == [] and commits == []  # nobody listened: nothing was told
        event.listen(runner.engine, "before_cursor_execute", on_statement)
        event.listen(runner.engine, "commit", on_commit)
        try:
            action = tool_action("heard", 1, "add", {"a": 1}, Counters())
            fencing.append_entry(connection, "heard", claim.epoch, 1, action, None, 60)
        finally:
            event.remove(runner.engine, "before_cursor_execute", on_statement)
            event.remove(runner.engine, "commit", on_commit)
    inserts = [s for s in statements if s.lstrip().startswith(("INSERT", "WITH"))]
    assert len(inserts) == 1 and commits == [1]
    if runner.engine.dialect.name == "sqlite":
        assert statements[0] == "BEGIN IMMEDIATE"


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_on_postgres_a_one_statement_write_is_its_own_transaction(runner: Runner) -> None:
    claim = claimed(runner, "one")
    with runner.engine.connect() as connection:
        raw: Any = connection.connection.dbapi_connection
        server_pid = raw.info.backend_pid
        fencing.append_entry(connection, "one", claim.epoch, 0, task_entry("t"), None, 60)
        # Committed when the statement returned: another session sees the row at once.
        assert [r["seq"] for r in entry_rows(runner.engine, "one")] == [0]
        # The connection is as the pool expects it again: no autocommit, no transaction.
        assert raw.autocommit is False and not in_transaction(connection)
        assert raw.info.backend_pid == server_pid
        # A write with the run's stop is ONE statement too (the run ended in the insert's
        # CTE): its own transaction, no BEGIN, no UPDATE after it, no COMMIT.
        stop = Stop(StopReason.FINAL, output="done")
        final = tool_action("one", 1, "add", {"a": 1}, Counters(steps=1))
        statements: list[str] = []

        def on_statement(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            statements.append(statement)

        event.listen(runner.engine, "before_cursor_execute", on_statement)
        try:
            fencing.append_entry(connection, "one", claim.epoch, 1, final, stop, 60)
        finally:
            event.remove(runner.engine, "before_cursor_execute", on_statement)
        assert len(statements) == 1 and statements[0].lstrip().startswith("WITH"), statements
        assert raw.autocommit is False and not in_transaction(connection)
    row = runner.row("one")
    assert (row.status, row.stop_reason, row.output) == ("finished", "final", "done")
    assert (row.steps, row.lease_owner, row.lease_expires_at) == (1, None, None)
    assert [r["seq"] for r in entry_rows(runner.engine, "one")] == [0, 1]


def test_a_fenced_out_last_write_neither_writes_nor_ends_the_run(runner: Runner) -> None:
    claim = claimed(runner, "late")
    with runner.engine.connect() as connection:
        fencing.append_entry(connection, "late", claim.epoch, 0, task_entry("t"), None, 60)
        final = tool_action("late", 1, "add", {"a": 1}, Counters(steps=1))
        stop = Stop(StopReason.FINAL, output="done")
        with pytest.raises(LeaseLost):
            fencing.append_entry(connection, "late", claim.epoch + 1, 1, final, stop, 60)
        assert not in_transaction(connection)
    assert [r["seq"] for r in entry_rows(runner.engine, "late")] == [0]
    row = runner.row("late")
    assert (row.status, row.stop_reason, row.lease_owner) == ("running", None, "w:1:1")


def test_a_write_that_may_share_a_statement_makes_its_own_only_if_written_alone(
    runner: Runner,
) -> None:
    dialect = runner.engine.dialect
    claim = claimed(runner, "later")
    action = tool_action("later", 1, "add", {"a": 1, "é": [None, 2.5]}, Counters(steps=1))
    append = fencing.Append.of(dialect, "later", claim.epoch, 1, [action], None, 60)
    if dialect.name == "sqlite":  # no shared statement: its own, made at once
        assert append.together is None and append.later is None and len(append.inserts) == 1
        return
    assert append.together is not None and append.inserts == () and append.one_statement
    statement = fenced_inserts.fenced_insert(dialect, 1)
    expected = statement.parameters(
        fenced_inserts.insert_values(append.together, dict(append.fence))
    )
    ((sql, parameters),) = append.statements()
    assert sql == statement.sql and isinstance(parameters, dict)
    assert parameters.keys() == dict(expected).keys()
    assert append.statements() is append.inserts and append.later is None  # made once
    with (
        runner.engine.connect() as connection,
        driver.Write(connection, one_statement=True) as write,
    ):
        append.run(write)
    with runner.engine.connect() as connection:
        (row,) = connection.execute(select(entries.c.seq, entries.c.args)).all()
    assert (row.seq, row.args) == (1, {"a": 1, "é": [None, 2.5]})


def test_the_positional_fast_path_binds_what_the_general_path_binds(runner: Runner) -> None:
    dialect = runner.engine.dialect
    positional = fenced_inserts.positional_insert(dialect)
    if dialect.name != "sqlite":
        assert positional is None  # named binds (psycopg): the general path only
        return
    assert positional is not None
    statement = fenced_inserts.fenced_insert(dialect, 1)
    at = utc_now()
    fence = fenced_inserts.fence_values(backend_for(dialect.name), "r", 3, at, 60)
    action = tool_action("r", 1, "add", {"a": 1, "é": [None, 2.5]}, Counters(1, 2**70, 1e308))
    entries = [
        task_entry("t\x00\ud800 NUL and a lone surrogate"),
        action,
        replace(observation(action, "3 ✓"), is_error=True, attempt=2, call_id="call-1"),
        replace(task_entry("x"), content={"json": [1, "two"]}, cost=float("inf")),
    ]
    for seq, entry in enumerate(entries):
        general = statement.parameters({**entry_row("r", seq, 3, entry, at), **fence})
        fast = positional.parameters(entry_values("r", seq, 3, entry, at), fence)
        assert fast == general, entry


@pytest.mark.parametrize("rows", [1, 3])
def test_a_write_reads_its_run_back_only_when_the_run_has_heard_something(
    runner: Runner, rows: int
) -> None:
    # SQLite: a write first tries the insert that returns nothing and writes only while no
    # cancel was asked and no message waits; only if it wrote nothing does the insert that
    # reads them back (and fences) run. Either way the write says what its run heard.
    run_id = f"quiet{rows}"
    claim = claimed(runner, run_id)
    statements: list[str] = []

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        statements.append(statement)

    def write(connection: Connection, seq: int, epoch: int) -> fenced_inserts.Heard:
        calls = [tool_action(run_id, seq, "add", {"a": i}, Counters()) for i in range(rows)]
        statements.clear()
        return fencing.append_entries(connection, run_id, epoch, seq, calls, None, 60)

    def inserts() -> list[str]:
        return [s for s in statements if s.lstrip().startswith(("INSERT", "WITH"))]

    quiet = runner.engine.dialect.name == "sqlite"
    with runner.engine.connect() as connection:
        fencing.append_entry(connection, run_id, claim.epoch, 0, task_entry("t"), None, 60)
        event.listen(runner.engine, "before_cursor_execute", on_statement)
        try:
            assert write(connection, 1, claim.epoch) == fenced_inserts.Heard(False, 0)
            assert len(inserts()) == 1
            assert ("RETURNING" not in inserts()[0]) is quiet
            with runner.engine.begin() as other:
                other.execute(
                    runs.update()
                    .where(runs.c.id == run_id)
                    .values(cancel_requested=True, undelivered_messages=2)
                )
            assert write(connection, 1 + rows, claim.epoch) == fenced_inserts.Heard(True, 2)
            assert len(inserts()) == (2 if quiet else 1)
            with pytest.raises(LeaseLost):
                write(connection, 1 + 2 * rows, claim.epoch + 1)
            assert not in_transaction(connection)
        finally:
            event.remove(runner.engine, "before_cursor_execute", on_statement)
    # Every row of the two writes once, none of the fenced one.
    assert [r["seq"] for r in entry_rows(runner.engine, run_id)] == list(range(1 + 2 * rows))


def test_a_write_whose_answer_was_lost_over_a_months_end_is_kept_once(runner: Runner) -> None:
    # The journal's retry tells a try that did commit by its duplicate key; on PostgreSQL the
    # journal is partitioned by month of created_at (revision 0022), so both tries must carry
    # the same created_at, or a retry after midnight of a month's last day lands in the next
    # month's partition and is kept twice.
    from datetime import UTC, datetime

    from sqlalchemy.exc import OperationalError

    from runner.core.clock import ManualClock

    claim = claimed(runner, "midnight")
    clock = ManualClock(datetime(2026, 12, 31, 23, 59, 59, 900_000, tzinfo=UTC).timestamp())
    journal = SqlJournal(runner.engine, claim, lease_seconds=60, clock=clock)
    journal.append(task_entry("t"))
    commit = journal.writer.commit
    lost: list[int] = []

    def commit_then_lose_the_answer(append: Any) -> Any:
        heard = commit(append)
        if not lost:
            lost.append(1)
            clock.advance(1.0)  # the retry comes after the month's end
            raise OperationalError("COMMIT", {}, Exception("server closed the connection"))
        return heard

    journal.writer.commit = commit_then_lose_the_answer  # type: ignore[method-assign]
    journal.append(tool_action("midnight", 1, "add", {"a": 1}, Counters(steps=1)))
    assert lost == [1]
    rows = entry_rows(runner.engine, "midnight")
    assert [r["seq"] for r in rows] == [0, 1]
    with runner.engine.connect() as connection:
        stamps = connection.execute(
            select(entries.c.created_at).where(entries.c.run_id == "midnight", entries.c.seq == 1)
        ).scalars()
        assert [stamp.month for stamp in stamps] == [12]


def test_numbered_placeholders_keep_each_names_first_number() -> None:
    sql, names = driver.numbered("SELECT %(a)s, %(b)s::VARCHAR, %(a)s, 5 %% 2")
    assert (sql, names) == ("SELECT $1, $2::VARCHAR, $1, 5 % 2", ("a", "b"))
    assert isinstance(sql, driver.Numbered)
    with pytest.raises(ValueError, match="lone %"):
        driver.numbered("SELECT 5 % 2")


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_statement_psycopg_would_parse_at_every_run_is_sent_numbered(runner: Runner) -> None:
    # More binds than psycopg keeps its parse of (and one used twice): rendered once with
    # $1, $2, ..., and run on a raw cursor; a short one keeps psycopg's cached path.
    binds = [bindparam(f"b{i}", type_=Integer()) for i in range(60)]
    long = driver.Prepared.of(select(*binds, binds[0].label("again")), runner.engine.dialect)
    short = driver.Prepared.of(select(bindparam("b0", type_=Integer())), runner.engine.dialect)
    assert isinstance(long.sql, driver.Numbered) and "$60" in long.sql and "$61" not in long.sql
    assert not isinstance(short.sql, driver.Numbered)
    # A psycopg without raw cursors (3.1, which the project allows) keeps psycopg's parse.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver, "_raw_cursors", lambda: False)
        named = driver.Prepared.of(select(*binds), runner.engine.dialect)
    assert not isinstance(named.sql, driver.Numbered) and "%(b59)s" in named.sql
    values = {f"b{i}": i * 10 for i in range(60)}
    with runner.engine.connect() as connection, driver.Write(connection) as write:
        for _ in range(7):  # past psycopg's prepare threshold: a server-side prepared statement
            (row,) = write.rows(long.sql, long.parameters(dict(values)))
            assert list(row) == [i * 10 for i in range(60)] + [0]
        assert list(write.rows(short.sql, short.parameters({"b0": 4}))) == [(4,)]


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_on_postgres_a_journal_writers_connection_stays_in_autocommit_between_writes(
    runner: Runner,
) -> None:
    # The journal's writes leave their kept connection in autocommit (psycopg's switch costs
    # a lock and a generator each way); any other turn on it, and the pool once the writer
    # closes, find it out of autocommit: their transactions stay whole.
    claim = claimed(runner, "kept")
    writer = Writer(runner.engine)
    journal = SqlJournal(runner.engine, claim, lease_seconds=60, writer=writer)
    journal.append(task_entry("t"))
    assert writer._connections is not None  # PostgreSQL's writer keeps its connections
    (kept,) = writer._connections._all
    raw: Any = kept.connection.dbapi_connection
    assert raw.autocommit is True and not in_transaction(kept)
    switches: list[bool] = []
    psycopg_connection = type(raw)
    autocommit = psycopg_connection.autocommit

    def counted(self: Any, value: bool) -> None:
        switches.append(value)
        autocommit.fset(self, value)

    psycopg_connection.autocommit = property(autocommit.fget, counted)
    try:
        action = tool_action("kept", 1, "add", {"a": 1}, Counters())
        journal.append(action)
        journal.append(observation(action, "1"))
        assert switches == []  # none from one journal write to the next
        # Another turn: out of autocommit, so a failure undoes its whole transaction.
        with pytest.raises(IntegrityError), writer.turn() as connection, connection.begin():
            assert raw.autocommit is False
            connection.execute(runs.update().where(runs.c.id == "kept").values(steps=41))
            duplicate = entry_row("kept", 0, claim.epoch, task_entry("t"), utc_now())
            connection.execute(entries.insert().values(duplicate))
        assert switches == [False]
    finally:
        psycopg_connection.autocommit = autocommit
    assert stored(runner, "kept") == (0, 0)
    # Several statements on a connection in autocommit (back in it for the journal's next
    # turn) are one transaction too: BEGIN, then the write's COMMIT or ROLLBACK.
    with writer._connections.turn(autocommit=True) as connection:
        assert raw.autocommit is True
        with pytest.raises(RuntimeError), driver.Write(connection) as write:
            write.execute("UPDATE runs SET steps = 42 WHERE id = 'kept'")
            assert in_transaction(connection)
            raise RuntimeError("undone")
        assert not in_transaction(connection)
        with driver.Write(connection) as write:
            write.execute("UPDATE runs SET steps = 43 WHERE id = 'kept'")
            write.execute("UPDATE runs SET tokens = 7 WHERE id = 'kept'")
        assert not in_transaction(connection)
    assert stored(runner, "kept") == (43, 7)
    writer.close()
    with runner.engine.connect() as connection:
        assert connection.connection.dbapi_connection.autocommit is False


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_on_postgres_a_connection_given_back_in_autocommit_leaves_it(db_url: str) -> None:
    # A journal writer's kept connection is in autocommit between writes; given back to the
    # pool without the writer's close (a runner dropped unclosed), its next user still gets
    # it out of autocommit, so that its transactions stay whole.
    engine = open_engine(db_url, pool_size=1)
    try:
        with engine.connect() as connection:
            raw: Any = connection.connection.dbapi_connection
            server_pid = raw.info.backend_pid
            raw.autocommit = True
        with engine.connect() as connection:
            raw = connection.connection.dbapi_connection
            assert raw.info.backend_pid == server_pid  # the same one, from the pool
            assert raw.autocommit is False
    finally:
        engine.dispose()


def every_column(engine: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's entries, every column but the run's id and the time written, in order."""
    with engine.connect() as connection:
        rows = connection.execute(
            select(entries).where(entries.c.run_id == run_id).order_by(entries.c.seq)
        ).mappings()
        return [{k: v for k, v in row.items() if k not in ("run_id", "created_at")} for row in rows]


def test_an_entry_alone_is_written_at_once_as_the_group_would_write_it(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write of one entry, with no other write of the process queued (and on SQLite none
    # holding the file), goes straight to its statement on the writer's kept connection,
    # not through a group commit of an Append: on SQLite its quiet insert, committed if it
    # wrote the row (driver.commit_if_changed); on PostgreSQL its fenced insert in
    # autocommit, read back (driver.read_if_unwatched). Its rows are the general path's to
    # the byte; a cancel is heard, and a write fenced out raises LeaseLost.
    sqlite = runner.engine.dialect.name == "sqlite"
    tried: list[tuple[str, bool | None]] = []
    commit_if_changed, read_if_unwatched = driver.commit_if_changed, driver.read_if_unwatched

    def committing(*args: Any) -> bool | None:
        done = commit_if_changed(*args)
        tried.append(("commit", done))
        return done

    def reading(*args: Any) -> Any:
        found = read_if_unwatched(*args)
        tried.append(("read", None if found is None else bool(found)))
        return found

    monkeypatch.setattr(driver, "commit_if_changed", committing)
    monkeypatch.setattr(driver, "read_if_unwatched", reading)
    way = "commit" if sqlite else "read"
    claim = claimed(runner, "alone")
    action = tool_action("alone", 1, "add", {"a": 1, "é": [None, 2.5]}, Counters(1, 2, 0.5))
    written = [task_entry("t"), action, replace(observation(action, "3 ✓"), call_id="c-1")]
    with runner.store.open_journal(claim, lease_seconds=60) as journal:
        assert isinstance(journal, SqlJournal)
        for entry in written:
            journal.append(entry)
        # PostgreSQL's writer keeps no connection before its first write, which makes one.
        assert tried == [(way, True)] * (3 if sqlite else 2)
        # The same entries through the general path (Append.of, the group's transaction).
        general = claimed(runner, "general")
        with runner.engine.connect() as connection:
            for seq, entry in enumerate(written):
                fencing.append_entry(connection, "general", general.epoch, seq, entry, None, 60)
        assert every_column(runner.engine, "alone") == every_column(runner.engine, "general")

        with runner.engine.begin() as other:
            other.execute(runs.update().where(runs.c.id == "alone").values(cancel_requested=True))
        tried.clear()
        journal.append(observation(action, "again"))
        # SQLite's quiet insert wrote nothing: the loud one, through the group, then did.
        assert tried == [(way, not sqlite)]
        assert journal.cancel_requested()

        leases.claim_run(
            runner.engine, "alone", owner="w:2:1", lease_seconds=60, max_resumes=9, steal=True
        )
        journal.lost.clear()
        with pytest.raises(LeaseLost):
            journal.append(observation(action, "fenced"))
    assert [r["seq"] for r in entry_rows(runner.engine, "alone")] == [0, 1, 2, 3]
    with runner.engine.connect() as connection:
        assert not in_transaction(connection)


def test_an_entry_alone_that_the_database_refuses_leaves_no_transaction(tmp_path: Path) -> None:
    # SQLite's: PostgreSQL's write alone is one statement in autocommit, its error its own.
    with Runner(f"sqlite:///{tmp_path / 'refused.db'}") as runner:
        refused_alone(runner)


def refused_alone(runner: Runner) -> None:
    claim = claimed(runner, "refused")
    writer = Writer(runner.engine)
    try:
        quiet = write_alone.quiet_one(
            runner.engine.dialect, "refused", claim.epoch, 0, task_entry("t"), utc_now(),
            PLAIN,
        )  # fmt: skip
        assert quiet is not None
        assert writer.commit_alone(quiet, rows=1)
        with pytest.raises(IntegrityError):  # the same seq again: SqlJournal's retry tells
            writer.commit_alone(quiet, rows=1)
        with writer.turn() as connection:
            assert not in_transaction(connection)
        # It goes on writing, and a write whose fence fails changes nothing and says so.
        action = tool_action("refused", 1, "add", {"a": 1}, Counters())
        quiet = write_alone.quiet_one(
            runner.engine.dialect, "refused", claim.epoch, 1, action, utc_now(), PLAIN
        )
        assert quiet is not None
        assert writer.commit_alone(quiet, rows=1)
        fenced = write_alone.quiet_one(
            runner.engine.dialect, "refused", claim.epoch + 1, 2, action, utc_now(), PLAIN
        )
        assert fenced is not None
        assert not writer.commit_alone(fenced, rows=1)
        with writer.turn() as connection:
            assert not in_transaction(connection)
    finally:
        writer.close()
    assert [r["seq"] for r in entry_rows(runner.engine, "refused")] == [0, 1]
