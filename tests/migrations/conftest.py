"""Empty (unmigrated) databases: a new SQLite file, or a new PostgreSQL database, and an
engine on one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from runner.sql.database import open_engine


@pytest.fixture
def empty_postgres(postgres_database: str) -> Iterator[str]:
    """A brand-new PostgreSQL database with nothing in it, on the test server."""
    # `postgres_database` decides whether PostgreSQL tests run here (skip or fail).
    admin = create_engine(postgres_database, isolation_level="AUTOCOMMIT")
    name = f"runner_empty_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_database).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind: nothing migrated, nothing created."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    url: str = request.getfixturevalue("empty_postgres")
    return url


@pytest.fixture
def engine(empty_url: str) -> Iterator[Engine]:
    """An engine on `empty_url`, disposed of after the test."""
    engine = open_engine(empty_url)
    try:
        yield engine
    finally:
        engine.dispose()
