"""Opening the database: the URL, the engine (set up by its backend), the migrations and
the schema revision check."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from sqlalchemy import Connection, Engine, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import NullPool, QueuePool

from runner.errors import (
    DatabaseCorrupt,
    DatabaseRefused,
    SchemaOutOfDate,
    SchemaTooNew,
    first_line,
)
from runner.sql.backend import backend_for
from runner.sql.database_failures import unavailable
from runner.sql.reads import SCHEMA_REVISION, VERSION_QUERY
from runner.sql.urls import encode_password, not_a_url, redact_url, resolve_direct_url
from runner.sql.urls import resolve_url as resolve_url  # re-exported


def _parsed(url: str | None) -> URL:
    """`url` (or RUNNER_DATABASE_URL, or ./runner.db) parsed, PostgreSQL through psycopg 3."""
    text = resolve_url(url)
    try:
        # A password with an unencoded '@' is read as the user meant it, not as a host name
        # holding the password's tail (which a driver's message would then show).
        parsed = make_url(encode_password(text))
    except ArgumentError:
        raise DatabaseRefused(not_a_url(text)) from None
    if parsed.drivername == "postgresql" or parsed.drivername == "postgres":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _direct(parsed: URL) -> URL | None:
    """The server itself when `parsed` is a pooler (RUNNER_DIRECT_DATABASE_URL, or
    --direct-db, which sets it): PostgreSQL only, None for SQLite or without one."""
    direct = resolve_direct_url()
    if direct is None or parsed.get_backend_name() != "postgresql":
        return None
    return _parsed(direct)


def open_engine(
    url: str | None = None,
    *,
    pool: bool = True,
    pool_size: int | None = None,
    idle_transactions: float | None = None,
) -> Engine:
    """An engine for `url` (or RUNNER_DATABASE_URL, or ./runner.db) with runner's hooks.

    `pool_size`: at most that many connections, all kept (a worker's pool); else
    SQLAlchemy's default pool (5, and 10 more while busy). `idle_transactions`: seconds
    after which PostgreSQL ends a session left idle inside a transaction (a writer's).
    """
    parsed = _parsed(url)
    kwargs: dict[str, Any] = {}
    if not pool:
        kwargs["poolclass"] = NullPool
    elif pool_size is not None and parsed.database not in (None, "", ":memory:"):
        # Checking out waits for a connection given back rather than opening one more.
        kwargs.update(poolclass=QueuePool, pool_size=pool_size, max_overflow=0)
    try:
        return backend_for(parsed.get_backend_name()).create_engine(
            parsed, kwargs, idle_transactions=idle_transactions, direct=_direct(parsed)
        )
    except (ArgumentError, ImportError) as exc:
        raise DatabaseRefused(f"cannot use {redact_url(parsed)}: {exc}") from None


def open_read_only(url: str | None = None) -> Engine:
    """An engine for `url` that cannot write (SQLite opened `mode=ro`, PostgreSQL in READ
    ONLY transactions), on a schema at head. It never migrates: a page only reads."""
    parsed = _parsed(url)
    try:
        engine = backend_for(parsed.get_backend_name()).read_only_engine(parsed, _direct(parsed))
    except (ArgumentError, ImportError) as exc:
        raise DatabaseRefused(f"cannot use {redact_url(parsed)}: {exc}") from None
    try:
        if not _at_head(engine):
            try:
                current = current_revision(engine)
            except SQLAlchemyError as exc:
                _unreadable(engine, exc)
            _require_head(engine, current)
    except BaseException:
        engine.dispose()
        raise
    return engine


def connect(
    url: str | None = None,
    *,
    pool_size: int | None = None,
    idle_transactions: float | None = None,
) -> Engine:
    """An engine for `url` whose schema is at head: a brand-new SQLite file is migrated,
    any other database must have been upgraded (`ensure_schema`)."""
    engine = open_engine(url, pool_size=pool_size, idle_transactions=idle_transactions)
    try:
        ensure_schema(engine)
    except BaseException:
        # No caller holds the engine to close it: release the pooled connection the check
        # opened, or it leaks (a ResourceWarning) on an unmigrated database.
        engine.dispose()
        raise
    return engine


# -- migrations -----------------------------------------------------------------------------


def migrations_folder() -> Path:
    """Where the Alembic scripts are: in the repo (`migrations/`) or in the installed wheel."""
    return Path(str(resources.files("runner.migrations")))


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_folder()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    config = alembic_config("sqlite://")
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None, "the migrations folder has no head revision"
    return head


def known_revisions() -> set[str]:
    """Every revision this runner's migrations know."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return {script.revision for script in scripts.walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the migrations up to `revision` (`runner db upgrade`).

    Migrations are serialised (see Backend.lock_migrations): of two upgrades at once, the
    second waits for the first to commit, then finds the schema at head and does nothing.
    """
    from alembic import command

    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        backend_for(engine.dialect.name).lock_migrations(connection)
        _refuse_newer(_revision_of(connection), engine)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def upgrade_database(url: str | None = None) -> str:
    """Migrate the database at `url` to the latest revision; its URL, password hidden."""
    engine = open_engine(url)
    try:
        upgrade(engine)
    except SQLAlchemyError as exc:
        corrupt = damaged(engine.url, exc)
        if corrupt is not None:
            raise corrupt from None
        raise
    finally:
        engine.dispose()
    return redact_url(engine.url)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        backend_for(engine.dialect.name).lock_migrations(connection)
        _refuse_newer(_revision_of(connection), engine)
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def damaged(url: Any, exc: BaseException) -> DatabaseCorrupt | None:
    """The error to raise if `exc` says the database at `url` is damaged, else None.

    A damaged file is not an outage: waiting and retrying (as for a server that is away)
    would go on for ever, so it is said in one line and the command stops.
    """
    backend = backend_for(make_url(redact_url(url)).get_backend_name())
    if not backend.is_corrupt(exc):
        return None
    return DatabaseCorrupt(
        f"{redact_url(url)} is damaged or is not a {backend.title} database "
        f"({first_line(exc)}): restore it from a backup; retrying will not mend it"
    )


def failure_message(url: Any, exc: BaseException) -> str:
    """One line for a database error that reached a command: what failed, and where."""
    corrupt = damaged(url, exc)
    if corrupt is not None:
        return str(corrupt)
    return f"database error on {redact_url(url)}: {first_line(exc)}"


def ensure_schema(engine: Engine) -> None:
    """Check the schema is at head; migrate a brand-new SQLite file, never anything else."""
    if _at_head(engine):
        return
    try:
        fresh = backend_for(engine.dialect.name).migrates_fresh_files
        if fresh and _migrate_if_fresh(engine):
            return
        current = current_revision(engine)
    except SQLAlchemyError as exc:
        _unreadable(engine, exc)
    _require_head(engine, current)


def _at_head(engine: Engine) -> bool:
    """Whether the schema is at head, known from one SELECT and without Alembic: the common
    case of every command. False sends the caller to the full check, which says why."""
    try:
        with engine.connect() as connection:
            try:
                stored = connection.exec_driver_sql(VERSION_QUERY).scalars().all()
            except SQLAlchemyError:
                return False  # no version table yet, or unreadable: the full check tells
    except SQLAlchemyError as exc:
        _unreadable(engine, exc)
    return stored == [SCHEMA_REVISION]


def _require_head(engine: Engine, current: str | None) -> None:
    _refuse_newer(current, engine)
    head = head_revision()
    if current != head:
        found = "no runner schema" if current is None else f"schema revision {current}"
        raise SchemaOutOfDate(
            f"{redact_url(engine.url)} has {found}, this runner needs {head}: "
            "run `runner db upgrade` (with the same --db) first"
        )


def _unreadable(engine: Engine, exc: SQLAlchemyError) -> NoReturn:
    """The one-line error for a database that would not give its revision: damaged (never
    to be retried), or away or unreadable."""
    corrupt = damaged(engine.url, exc)
    if corrupt is not None:
        raise corrupt from None
    verb = "open" if isinstance(exc, OperationalError) else "read"
    where = redact_url(engine.url)
    raise unavailable(f"cannot {verb} {where}: {first_line(exc)}", exc) from None


def _revision_of(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def _refuse_newer(current: str | None, engine: Engine) -> None:
    """A revision this runner does not know was written by a newer one: no migration of
    ours can go up (or down) from it, and running on it could misread the schema."""
    if current is None or current in known_revisions():
        return
    raise SchemaTooNew(
        f"{redact_url(engine.url)} is at schema revision {current}, newer than this "
        f"runner's latest ({head_revision()}): upgrade runner to use this database"
    )


def _migrate_if_fresh(engine: Engine) -> bool:
    """Migrate an empty SQLite file; True if this call did. Safe when processes race.

    The look and the migration share one BEGIN IMMEDIATE transaction: a second process
    waits for the first to commit, then finds the schema in place and leaves it alone.
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    with engine.begin() as connection:
        if MigrationContext.configure(connection).get_current_revision() is not None:
            return False
        if inspect(connection).get_table_names():
            return False  # someone else's tables: never migrate what runner did not create
        config = alembic_config(engine.url.render_as_string(hide_password=False))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return True
