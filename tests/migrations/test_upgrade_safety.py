"""`runner db upgrade` where it used to break: a database migrated by a newer runner, and two
upgrades of a fresh PostgreSQL database at once."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner import Runner, SchemaOutOfDate, SchemaTooNew
from runner.cli import main
from runner.sql.database import current_revision, ensure_schema, head_revision, open_engine, upgrade

RUNNER = Path(sys.executable).parent / "runner"
FUTURE = "0099_from_a_newer_runner"


def _from_the_future(url: str) -> None:
    """Migrate `url`, then mark it as migrated by a runner newer than this one."""
    engine = open_engine(url)
    try:
        upgrade(engine)
        with engine.begin() as connection:
            connection.execute(text(f"UPDATE alembic_version SET version_num = '{FUTURE}'"))
    finally:
        engine.dispose()


def _says_upgrade_runner(message: str) -> None:
    assert f"schema revision {FUTURE}" in message
    assert f"newer than this runner's latest ({head_revision()})" in message
    assert "upgrade runner" in message
    assert "runner db upgrade" not in message  # the advice that cannot work


def test_ensure_schema_says_the_database_is_newer(empty_url: str) -> None:
    _from_the_future(empty_url)
    engine = open_engine(empty_url)
    try:
        with pytest.raises(SchemaTooNew) as raised:
            ensure_schema(engine)
    finally:
        engine.dispose()
    assert isinstance(raised.value, SchemaOutOfDate)  # callers that catch the family still do
    _says_upgrade_runner(str(raised.value))
    with pytest.raises(SchemaTooNew):
        Runner(empty_url)


@pytest.mark.parametrize("args", [["db", "upgrade"], ["list"], ["show", "x"], ["stats"]])
def test_commands_on_a_newer_database_say_upgrade_runner(empty_url: str, args: list[str]) -> None:
    _from_the_future(empty_url)
    result = CliRunner().invoke(main, [*args, "--db", empty_url], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    _says_upgrade_runner(lines[0])
    engine = open_engine(empty_url)
    try:
        assert current_revision(engine) == FUTURE  # nothing was touched
    finally:
        engine.dispose()


def test_db_upgrade_of_a_newer_database_in_a_real_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    _from_the_future(url)
    done = subprocess.run(
        [str(RUNNER), "db", "upgrade", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")},
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    _says_upgrade_runner(line)


# -- two upgrades at once --------------------------------------------------------------------


@pytest.fixture
def fresh_postgres_databases(postgres_database: str) -> Iterator[list[str]]:
    """Four brand-new, empty PostgreSQL databases."""
    admin = create_engine(postgres_database, isolation_level="AUTOCOMMIT")
    names = [f"runner_race_{uuid.uuid4().hex[:10]}" for _ in range(4)]
    with admin.connect() as connection:
        for name in names:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield [
            make_url(postgres_database).set(database=name).render_as_string(hide_password=False)
            for name in names
        ]
    finally:
        with admin.connect() as connection:
            for name in names:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_two_db_upgrades_at_once_both_succeed(fresh_postgres_databases: list[str]) -> None:
    # Unserialised, the loser failed on a duplicate key in pg_type in 3 tries of 5.
    # Each database gets two upgrades started together; the databases race side by side.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    racers = [
        subprocess.Popen(
            [str(RUNNER), "db", "upgrade", "--db", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for url in fresh_postgres_databases
        for _ in range(2)
    ]
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        assert "is at the latest schema revision" in out
    for url in fresh_postgres_databases:
        engine = open_engine(url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()
