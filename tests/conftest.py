"""Shared fixtures: a fresh, migrated database per test, on SQLite and on PostgreSQL.

PostgreSQL tests use RUNNER_TEST_POSTGRES_URL (default: the local server). They skip when
no server answers, unless RUNNER_REQUIRE_POSTGRES=1 (as in CI), where they fail instead.
"""

from __future__ import annotations

import compileall
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner.sql import schema
from runner.sql.database import open_engine, upgrade

POSTGRES_URL = os.environ.get(
    "RUNNER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = os.environ.get("RUNNER_REQUIRE_POSTGRES") == "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run long soak and stress tests")


# The project's own sources, whose bytecode the suite's thousands of `runner` processes and
# test agents load. pip compiles what it installs, but runner is installed editable, and an
# environment with PYTHONDONTWRITEBYTECODE (as CI's is) never writes a cache: each child
# compiled every runner module it imported, about 0.15 s of CPU a process.
COMPILED = ("runner", "tests", "examples")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled before starting it
    root = Path(__file__).resolve().parents[1]
    for folder in COMPILED:
        compileall.compile_dir(root / folder, quiet=2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The Ctrl-C tests go first: in whole-suite runs they failed at the end of a pytest
    # worker that had run some 1,400 tests before them (the child's SIGINT raised nothing),
    # and passed whenever they ran early, alone or after the acceptance and integration
    # layers. What the worker's state leaks into the child is not yet found.
    items.sort(key=lambda item: "interrupts" not in item.keywords)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: opt in with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _postgres_admin_url() -> str:
    return make_url(POSTGRES_URL).render_as_string(hide_password=False)


_postgres_checked: bool | None = None


def postgres_available() -> bool:
    global _postgres_checked
    if _postgres_checked is None:
        try:
            engine = create_engine(_postgres_admin_url())
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            engine.dispose()
            _postgres_checked = True
        except Exception:
            _postgres_checked = False
    return _postgres_checked


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A throwaway PostgreSQL database for this test session, migrated to head."""
    if not postgres_available():
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required but does not answer at {POSTGRES_URL}")
        pytest.skip("no PostgreSQL server answers (set RUNNER_TEST_POSTGRES_URL)")
    name = f"runner_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_postgres_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    engine = open_engine(url)
    upgrade(engine)
    engine.dispose()
    try:
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# Every table a test may fill, emptied between tests on the session's PostgreSQL: the
# schema's own (a table no foreign key ties to `runs`, such as `deltas`, kept the rows of the
# test before).
TABLES = tuple(sorted(schema.metadata.tables))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database: a new SQLite file, or the session's PostgreSQL emptied."""
    yield from fresh_database(request, request.param, tmp_path)


def fresh_database(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a migrated, empty database of `kind` (`sqlite` or `postgres`), for a
    fixture of its own parameters to yield from."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'runner.db'}"
        engine = open_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url
        return
    url = request.getfixturevalue("postgres_database")
    engine = open_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {', '.join(TABLES)} CASCADE"))
    engine.dispose()
    yield url


# PgBouncer and a streaming replica, each started once per session (tests/servers.py).
from tests.servers import pgbouncer, replica  # noqa: E402, F401
