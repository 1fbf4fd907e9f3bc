"""The raw-driver floor: commits through the plain `sqlite3` and `psycopg` modules.

Not a benchmark itself (imported as `raw_floor`, like `common`). Each commit is what a
durable journal cannot do without: one INSERT of one entries row (the run's own rows, the
same bytes) into a table with the entries table's columns and primary key, and a COMMIT
that the database makes durable. No SQLAlchemy in the timed loop, nothing else: no fence,
no RETURNING, no foreign key, no statement of the run's own, no Python between the commits
but the loop that issues them.

- SQLite: a `sqlite3` connection to the same file with the engine's own settings (WAL, the
  engine's `synchronous`, its busy timeout, foreign keys on, transaction control taken from
  the module), each commit `BEGIN IMMEDIATE`, the INSERT, COMMIT.
- PostgreSQL: a `psycopg` connection with the engine's connect arguments, autocommit off
  (psycopg sends BEGIN before the first statement of a transaction, as it does for
  runner), each commit the INSERT and `commit()`, on one reused cursor (psycopg prepares
  the statement server-side after its fifth execution, as it does runner's).

`autocommit=True` is a stricter floor still: each INSERT sent alone, in the driver's
autocommit mode, is its own transaction (no BEGIN, no COMMIT: one round trip on
PostgreSQL instead of three, which is how runner writes one-statement entries there).

The rows are turned into the values the driver takes (JSON as text, datetimes as SQLite
stores them) before the clock starts, with the column types' own bind processors.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import Engine, Table

from runner.backend import BUSY_TIMEOUT_MS


def driver_rows(engine: Engine, table: Table, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """`rows` as the driver takes them, in the table's column order."""
    dialect = engine.dialect
    processors = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in table.columns]
    names = [c.name for c in table.columns]
    return [
        tuple(
            value if process is None else process(value)
            for value, process in zip((row[name] for name in names), processors, strict=True)
        )
        for row in rows
    ]


def commits(
    engine: Engine, table: Table, rows: list[tuple[Any, ...]], clock: Any, autocommit: bool = False
) -> Any:
    """Time one commit per row through the raw driver; `clock()` starts the timer and the
    returned object's `since()` reads it (the benchmark's own Clock)."""
    if engine.dialect.name == "sqlite":
        return _sqlite(engine, table, rows, clock, autocommit)
    return _postgres(engine, table, rows, clock, autocommit)


def _insert_sql(table: Table, marker: str) -> str:
    columns = ", ".join(c.name for c in table.columns)
    values = ", ".join(marker for _ in table.columns)
    return f"INSERT INTO {table.name} ({columns}) VALUES ({values})"


def _sqlite(
    engine: Engine, table: Table, rows: list[tuple[Any, ...]], clock: Any, autocommit: bool
) -> Any:
    database = engine.url.database
    assert database, "the raw floor needs a SQLite file"
    with engine.connect() as connection:  # the engine's own setting, as its hook set it
        synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar_one()
    raw = sqlite3.connect(database, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute(f"PRAGMA synchronous={int(synchronous)}")
        raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        raw.execute("PRAGMA foreign_keys=ON")
        sql = _insert_sql(table, "?")
        cursor = raw.cursor()
        started = clock()
        if autocommit:
            for row in rows:
                cursor.execute(sql, row)  # its own transaction: isolation_level is None
        else:
            for row in rows:
                cursor.execute("BEGIN IMMEDIATE")
                cursor.execute(sql, row)
                raw.commit()
        return started.since()
    finally:
        raw.close()


def _postgres(
    engine: Engine, table: Table, rows: list[tuple[Any, ...]], clock: Any, autocommit: bool
) -> Any:
    import psycopg

    args, kwargs = engine.dialect.create_connect_args(engine.url)
    raw = psycopg.connect(*args, **{**kwargs, "autocommit": autocommit})
    try:
        sql = _insert_sql(table, "%s")
        cursor = raw.cursor()
        started = clock()
        for row in rows:
            cursor.execute(sql, row)
            raw.commit()  # in autocommit: nothing to commit, no round trip
        return started.since()
    finally:
        raw.close()
