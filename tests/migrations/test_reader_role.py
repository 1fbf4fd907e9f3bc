"""Revision 0004 on PostgreSQL: the role `runner sql` reads as, the function it reads through,
and the ways creating them can meet a server shared by many databases and many roles."""

from __future__ import annotations

import importlib.util
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from runner.sql.database import downgrade, open_engine, upgrade

pytestmark = pytest.mark.postgres

REVISION = (
    Path(__file__).resolve().parents[2] / "migrations" / "versions" / "0004_read_only_role.py"
)
DOCUMENTED = (
    "runs",
    "entries",
    "run_summary",
    "tool_calls",
    "queues",
    "messages",
    "limits",
    "limit_reservations",
    "limit_waiters",
    "tree_reservations",
)
# Tables of revisions after 0004: a downgrade to 0003 drops them, grants and all.
LATER_TABLES = (
    "queues",
    "messages",
    "limits",
    "limit_reservations",
    "limit_waiters",
    "tree_reservations",
)


def _revision() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runner_revision_0004", REVISION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _upgrade_sql(role: str) -> str:
    """Revision 0004's upgrade, for a role of another name (runner_reader is shared)."""
    sql: str = _revision().UPGRADE
    return sql.replace("runner_reader", role)


def _apply(engine: Engine, role: str) -> None:
    """Revision 0004's upgrade for `role`, in one transaction of its own."""
    with engine.begin() as connection:
        connection.execute(text(_upgrade_sql(role)))


def _scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as connection:
        return connection.execute(text(sql), params).scalar_one()


@pytest.fixture
def admin(postgres_database: str) -> Iterator[Engine]:
    engine = create_engine(postgres_database, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def new_database(admin: Engine, postgres_database: str) -> Iterator[Any]:
    """A factory of brand-new databases (owned by `owner`, if given), dropped afterwards."""
    made: list[str] = []

    def make(owner: str | None = None) -> str:
        name = f"runner_role_{uuid.uuid4().hex[:10]}"
        with admin.connect() as connection:
            connection.execute(
                text(f'CREATE DATABASE "{name}"' + (f" OWNER {owner}" if owner else ""))
            )
        made.append(name)
        url = make_url(postgres_database).set(database=name)
        if owner:
            url = url.set(username=owner)
        return url.render_as_string(hide_password=False)

    yield make
    with admin.connect() as connection:
        for name in made:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def roles(admin: Engine) -> Iterator[list[str]]:
    """Names of roles this test creates, dropped afterwards: ask for it before
    `new_database`, so that the databases (which a role may own) are dropped first."""
    names: list[str] = []
    yield names
    with admin.connect() as connection:
        for name in names:
            connection.execute(text(f"DROP ROLE IF EXISTS {name}"))


def test_the_reader_reads_the_documented_tables_and_views_only(new_database: Any) -> None:
    url = new_database()
    engine = open_engine(url)
    try:
        upgrade(engine)
        assert (
            _scalar(
                engine,
                "SELECT rolcanlogin OR rolsuper FROM pg_roles WHERE rolname = 'runner_reader'",
            )
            is False
        )
        for name in DOCUMENTED:
            assert _scalar(
                engine, f"SELECT has_table_privilege('runner_reader', '{name}', 'SELECT')"
            )
            for write in ("INSERT", "UPDATE", "DELETE", "TRUNCATE"):
                assert not _scalar(
                    engine, f"SELECT has_table_privilege('runner_reader', '{name}', '{write}')"
                )
        assert not _scalar(
            engine, "SELECT has_table_privilege('runner_reader', 'alembic_version', 'SELECT')"
        )
        with engine.connect() as connection:
            owner, definer = connection.execute(
                text(
                    "SELECT pg_get_userbyid(proowner), prosecdef FROM pg_proc "
                    "WHERE oid = to_regprocedure('runner_read(text)')"
                )
            ).one()
        assert (owner, definer) == ("runner_reader", True)
        # Nobody else may run it: it would lend them the reader's privileges, nothing more,
        # but it is runner sql's way in, not a public API.
        assert not _scalar(
            engine, "SELECT has_function_privilege('pg_monitor', 'runner_read(text)', 'EXECUTE')"
        )
    finally:
        engine.dispose()


def test_downgrade_revokes_here_and_keeps_the_shared_role(new_database: Any) -> None:
    kept, downgraded = new_database(), new_database()
    engines = [open_engine(kept), open_engine(downgraded)]
    try:
        for engine in engines:
            upgrade(engine)
        downgrade(engines[1], "0003")
        engine = engines[1]
        assert _scalar(engine, "SELECT count(*) FROM pg_roles WHERE rolname = 'runner_reader'") == 1
        assert _scalar(engine, "SELECT to_regprocedure('runner_read(text)') IS NULL")
        for name in DOCUMENTED:
            if name in LATER_TABLES:
                continue  # a later revision's table: dropped by the downgrade, grants and all
            assert not _scalar(
                engine, f"SELECT has_table_privilege('runner_reader', '{name}', 'SELECT')"
            )
        # The other database still reads as the role.
        assert _scalar(engines[0], "SELECT has_table_privilege('runner_reader', 'runs', 'SELECT')")
        upgrade(engine)  # the role is there already: fine
        assert _scalar(engine, "SELECT has_table_privilege('runner_reader', 'runs', 'SELECT')")
    finally:
        for engine in engines:
            engine.dispose()


def _at_0003(url: str) -> None:
    engine = open_engine(url)
    try:
        upgrade(engine, "0003")
    finally:
        engine.dispose()


def test_two_databases_creating_the_role_at_once(roles: list[str], new_database: Any) -> None:
    # Roles belong to the server: the second CREATE ROLE waits for the first transaction,
    # then fails on pg_authid's unique index; revision 0004 must take that in its stride.
    role = f"runner_test_reader_{uuid.uuid4().hex[:8]}"
    roles.append(role)
    urls = [new_database(), new_database()]
    for url in urls:
        _at_0003(url)
    engines = [open_engine(url) for url in urls]
    errors: list[BaseException] = []
    try:
        with engines[0].connect() as first, engines[1].connect() as second:
            first.execute(text(_upgrade_sql(role)))  # created, not committed

            def create_too(connection: Connection = second) -> None:
                try:
                    connection.execute(text(_upgrade_sql(role)))
                    connection.commit()
                except BaseException as exc:
                    errors.append(exc)

            waiter = threading.Thread(target=create_too)
            waiter.start()
            waiter.join(1.0)
            assert waiter.is_alive(), "the second CREATE ROLE should wait for the first"
            first.commit()
            waiter.join(30)
        assert errors == []
        for engine in engines:
            assert _scalar(engine, f"SELECT has_table_privilege('{role}', 'runs', 'SELECT')")
    finally:
        for engine in engines:
            engine.dispose()


def test_a_migrating_role_is_told_what_it_lacks(
    admin: Engine, roles: list[str], new_database: Any
) -> None:
    # An owner of its database with no right to create roles, then one that may not give
    # the function to the reader: each is told the SQL that fixes it, and nothing is left.
    owner = f"runner_test_owner_{uuid.uuid4().hex[:8]}"
    role = f"runner_test_reader_{uuid.uuid4().hex[:8]}"
    roles.extend([owner, role])
    with admin.connect() as connection:
        connection.execute(text(f"CREATE ROLE {owner} LOGIN"))
    url = new_database(owner=owner)
    _at_0003(url)
    engine = open_engine(url)
    try:
        with pytest.raises(
            DBAPIError, match=rf"may not create roles: .*CREATE ROLE {role} NOLOGIN"
        ):
            _apply(engine, role)
        with admin.connect() as connection:
            connection.execute(text(f"CREATE ROLE {role} NOLOGIN"))
        with pytest.raises(DBAPIError, match=rf"must belong to {role}.*GRANT {role} TO {owner}"):
            _apply(engine, role)
        assert _scalar(engine, "SELECT to_regprocedure('runner_read(text)') IS NULL")
        # What the message (and the README) says to do, as a superuser:
        with admin.connect() as connection:
            connection.execute(text(f"GRANT {role} TO {owner}"))
        with engine.begin() as connection:
            connection.execute(text(f"GRANT CREATE ON SCHEMA public TO {role}"))
            connection.execute(text(_upgrade_sql(role)))
        assert (
            _scalar(
                engine,
                "SELECT pg_get_userbyid(proowner) FROM pg_proc "
                "WHERE oid = to_regprocedure('runner_read(text)')",
            )
            == role
        )
    finally:
        engine.dispose()
