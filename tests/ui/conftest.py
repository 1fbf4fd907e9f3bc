"""Fixtures of the page's tests: a seeded history per test module, on SQLite and on
PostgreSQL (a database of its own, so no other test's cleanup empties it mid-module)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner.sql.database import open_engine, upgrade

from .seed import Seeded, seed

POSTGRES_URL = os.environ.get(
    "RUNNER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = os.environ.get("RUNNER_REQUIRE_POSTGRES") == "1"


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def seeded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seeded]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'runner.db'}"
        engine = open_engine(url)
        upgrade(engine)
        engine.dispose()
        yield seed(url)
        return
    admin_url = make_url(POSTGRES_URL).render_as_string(hide_password=False)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:
        admin.dispose()
        if REQUIRE_POSTGRES:
            pytest.fail(f"PostgreSQL is required but does not answer at {POSTGRES_URL}")
        pytest.skip("no PostgreSQL server answers (set RUNNER_TEST_POSTGRES_URL)")
    name = f"runner_ui_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    try:
        engine = open_engine(url)
        upgrade(engine)
        engine.dispose()
        yield seed(url)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
