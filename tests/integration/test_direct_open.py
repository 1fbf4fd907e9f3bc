"""runner.direct opens a plain connection for the common case only, and says None for
everything else: the full path then creates, migrates, refuses or explains as it always
has, in its own words and exit codes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy.exc import DBAPIError

from runner import Runner
from runner.cli import main
from runner.service import overview
from runner.sql import libpq
from runner.sql import plain_connection as direct
from runner.sql import runs as store
from runner.sql.database import failure_message, open_engine
from runner.sql.reads import _pyformat, schema_at_head


@pytest.fixture
def at_head(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    with Runner(f"sqlite:///{path}"):
        pass
    return path


def test_an_sqlite_file_at_head_opens_plainly(
    at_head: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for url in (
        f"sqlite:///{at_head}",
        f"sqlite+pysqlite:///{at_head}",
        f"sqlite:///{at_head}?synchronous=normal",
        f"sqlite:///{str(at_head).replace('runs', '%72uns')}",  # unquoted, as SQLAlchemy does
    ):
        reader = direct.open_reader(url)
        assert reader is not None, url
        assert reader.sqlite and schema_at_head(reader)
        reader.close()
    monkeypatch.chdir(at_head.parent)
    monkeypatch.setenv("RUNNER_DATABASE_URL", "sqlite:///runs.db")  # relative, from the variable
    reader = direct.open_reader(None)
    assert reader is not None
    reader.close()


def test_anything_else_is_left_to_the_full_path(at_head: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"not a database, whatever its name says" * 100)
    behind = tmp_path / "behind.db"
    with Runner(f"sqlite:///{behind}") as runner, runner.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0006'")
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    for url in (
        f"sqlite:///{tmp_path / 'missing.db'}",  # the full path creates it
        "sqlite://",
        "sqlite:///:memory:",
        f"sqlite:///file:{at_head}?uri=true",
        f"sqlite:///{at_head}?synchronous=off",  # refused by the full path, in its words
        f"sqlite:///{at_head}?synchronous=full&synchronous=normal",
        f"sqlite:///{damaged}",
        f"sqlite:///{behind}",
        f"sqlite:///{empty}",
        f"mysql://u@localhost/{at_head}",
        "not a url",
        "postgresql://postgres@127.0.0.1:1/test",  # nobody listens there
        "postgresql://postgres@127.0.0.1:notaport/test",
        "postgresql://postgres@/test?host=a&host=b",
    ):
        assert direct.open_reader(url) is None, url


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_postgres_url_opens_with_the_dialects_arguments(db_url: str) -> None:
    for url in (
        db_url,
        db_url.replace("postgresql+psycopg://", "postgresql://"),
        db_url.replace("postgresql+psycopg://", "postgres://"),
        db_url + "?application_name=runner-list",
    ):
        reader = direct.open_reader(url)
        assert reader is not None, url
        try:
            assert not reader.sqlite and schema_at_head(reader)
            assert reader.rows("SELECT current_setting('application_name') AS name")[0]["name"] == (
                "runner-list" if "application_name" in url else ""
            )
        finally:
            reader.close()


def test_a_password_with_an_at_sign_is_read_as_runner_reads_it() -> None:
    # A trust-auth server ignores the password: the user and database must still be right,
    # which they would not be if `ss@127.0.0.1` had been taken for the host.
    found = direct._URL.match(direct.encode_password("postgresql://postgres:p@ss@127.0.0.1/test"))
    assert found is not None
    parts = found.groupdict()
    assert (parts["username"], parts["password"], parts["ipv4host"], parts["database"]) == (
        "postgres", "p%40ss", "127.0.0.1", "test",
    )  # fmt: skip


def test_the_binds_are_rewritten_for_psycopg_once() -> None:
    sql = "SELECT 1 WHERE a = :a AND b LIKE :b ESCAPE '\\' AND c = '100%'"
    assert _pyformat(sql) == (
        "SELECT 1 WHERE a = %(a)s AND b LIKE %(b)s ESCAPE '\\' AND c = '100%%'"
    )
    assert _pyformat(sql) is _pyformat(sql)  # cached


def test_the_full_path_still_words_what_the_fast_path_declined(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"not a database, whatever its name says" * 100)
    done = CliRunner().invoke(main, ["list", "--db", f"sqlite:///{damaged}"])
    assert done.exit_code == 1
    assert "is damaged or is not a SQLite database" in done.output
    assert done.output.count("\n") == 1
    fresh = tmp_path / "fresh.db"
    done = CliRunner().invoke(main, ["list", "--db", f"sqlite:///{fresh}"])
    # A read makes no database (issue 22): a missing file is a mistyped name, said so.
    assert done.exit_code == 1 and done.output.startswith(f"Error: no SQLite database at {fresh}")
    assert not fresh.exists()
    refused = CliRunner().invoke(main, ["list", "--db", "postgresql://postgres@127.0.0.1:1/x"])
    assert refused.exit_code == 1 and refused.output.startswith("Error: cannot open")


@contextmanager
def entries_away(url: str) -> Iterator[None]:
    """The journal's table renamed while the schema still says it is at head: every read
    of a run's entries fails with the driver's error, after the fast path has opened."""
    engine = open_engine(url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("ALTER TABLE entries RENAME TO entries_away")
        yield
    finally:
        with engine.begin() as connection:
            connection.exec_driver_sql("ALTER TABLE entries_away RENAME TO entries")
        engine.dispose()


def test_a_driver_error_while_reading_is_reported_once_not_read_again(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Runner(db_url) as runner:
        assert store.create_run(
            runner.engine, run_id="q1", agent=None, agent_name=None, release=None,
            task="t", budgets={},
        )  # fmt: skip
    connects: list[str] = []

    def counted(module: Any) -> None:
        real = module.connect

        def connect(*args: Any, **kwargs: Any) -> Any:
            connects.append(module.__name__)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, "connect", connect)

    with entries_away(db_url):
        with Runner(db_url) as runner, pytest.raises(DBAPIError) as full:
            runner.journal("q1")
        expected = f"Error: {failure_message(db_url, full.value)}\n"
        assert "entries" in expected
        # SQLAlchemy's SQLite dialect connects through sqlite3.dbapi2, runner's own path
        # through sqlite3 (and libpq itself on PostgreSQL): every way in is counted.
        for module in (sqlite3, sqlite3.dbapi2, psycopg, libpq):
            counted(module)
        for read in (lambda: overview.shown(db_url, "q1"), lambda: overview.listed(db_url)):
            connects.clear()
            with pytest.raises(DBAPIError) as fast:
                read()
            # The class the full path raises for it, from the one connection the fast path
            # opened: no Runner read it a second time.
            assert type(fast.value) is type(full.value)
            assert len(connects) == 1, connects
        for args in (["show", "q1"], ["list"]):
            connects.clear()
            done = CliRunner().invoke(main, [*args, "--db", db_url])
            assert (done.exit_code, done.output) == (1, expected)
            assert len(connects) == 1, connects
