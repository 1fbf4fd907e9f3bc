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

`CommittingJournal` is the loop's floor: the in-memory journal of `run_agent`, each of its
writes also one raw commit of the next prebuilt row, so a run through it pays the loop's own
work and the raw commits, and nothing a durable journal adds (no row built, no fence, no
SQLAlchemy). No durable runner of this loop can go under it.

`fenced_committer` is the same loop's floor with the journal's own write: each commit runs
the fenced INSERT ... RETURNING that runner sends (its SQL text, its parameters built before
the clock starts) through the raw driver, as runner runs it (SQLite: BEGIN IMMEDIATE, the
statement, COMMIT; PostgreSQL: the statement alone in autocommit, one round trip). A
durable runner of this design with no Python at all in its write path would cost this.

`autocommit=True` is a stricter floor still: each INSERT sent alone, in the driver's
autocommit mode, is its own transaction (no BEGIN, no COMMIT: one round trip on
PostgreSQL instead of three, which is how runner writes one-statement entries there).

The rows are turned into the values the driver takes (JSON as text, datetimes as SQLite
stores them) before the clock starts, with the column types' own bind processors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, Table

from runner.core.counters import Counters
from runner.core.journal import Entry, MemoryJournal, Stop
from runner.sql.backend import BUSY_TIMEOUT_MS


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
    with committer(engine, table, autocommit) as commit:
        started = clock()
        for row in rows:
            commit(row)
        return started.since()


@contextmanager
def committer(
    engine: Engine, table: Table, autocommit: bool = False
) -> Iterator[Callable[[tuple[Any, ...]], None]]:
    """A raw driver connection to the engine's database, as a function that commits one row
    (`driver_rows`' tuples) in a transaction of its own."""
    if engine.dialect.name == "sqlite":
        with _sqlite(engine, table, autocommit) as commit:
            yield commit
    else:
        with _postgres(engine, table, autocommit) as commit:
            yield commit


def _insert_sql(table: Table, marker: str) -> str:
    columns = ", ".join(c.name for c in table.columns)
    values = ", ".join(marker for _ in table.columns)
    return f"INSERT INTO {table.name} ({columns}) VALUES ({values})"


@contextmanager
def _connection(engine: Engine, autocommit: bool = False) -> Iterator[Any]:
    """A raw driver connection to the engine's database, with the engine's settings."""
    if engine.dialect.name == "sqlite":
        database = engine.url.database
        assert database, "the raw floor needs a SQLite file"
        with engine.connect() as connection:  # the engine's own setting, as its hook set it
            synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar_one()
        raw: Any = sqlite3.connect(database, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute(f"PRAGMA synchronous={int(synchronous)}")
        raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        raw.execute("PRAGMA foreign_keys=ON")
    else:
        import psycopg

        args, kwargs = engine.dialect.create_connect_args(engine.url)
        raw = psycopg.connect(*args, **{**kwargs, "autocommit": autocommit})
    try:
        yield raw
    finally:
        raw.close()


@contextmanager
def _sqlite(
    engine: Engine, table: Table, autocommit: bool
) -> Iterator[Callable[[tuple[Any, ...]], None]]:
    with _connection(engine) as raw:
        sql = _insert_sql(table, "?")
        cursor = raw.cursor()
        execute, commit = cursor.execute, raw.commit

        def in_transaction(row: tuple[Any, ...]) -> None:
            execute("BEGIN IMMEDIATE")
            execute(sql, row)
            commit()

        def alone(row: tuple[Any, ...]) -> None:
            execute(sql, row)  # its own transaction: isolation_level is None

        yield alone if autocommit else in_transaction


@contextmanager
def _postgres(
    engine: Engine, table: Table, autocommit: bool
) -> Iterator[Callable[[tuple[Any, ...]], None]]:
    with _connection(engine, autocommit) as raw:
        sql = _insert_sql(table, "%s")
        cursor = raw.cursor()
        execute, commit = cursor.execute, raw.commit

        def one(row: tuple[Any, ...]) -> None:
            execute(sql, row)
            commit()  # in autocommit: nothing to commit, no round trip

        yield one


@contextmanager
def fenced_committer(engine: Engine, sql: str) -> Iterator[Callable[[Any], None]]:
    """A raw driver connection running the journal's fenced statement `sql` (in the
    driver's paramstyle) once per commit, with the parameters it is given."""
    sqlite = engine.dialect.name == "sqlite"
    # PostgreSQL in autocommit: a one-statement write is its own transaction, as runner's.
    with _connection(engine, autocommit=True) as raw:
        cursor = raw.cursor()
        execute, fetch = cursor.execute, cursor.fetchall

        def one(parameters: Any) -> None:
            if sqlite:
                execute("BEGIN IMMEDIATE")
            execute(sql, parameters)
            written = fetch()
            if sqlite:
                raw.commit()
            assert written, "fenced out"

        yield one


@dataclass
class CommittingJournal(MemoryJournal):
    """`run_agent`'s journal, each write also committing the next of `rows` through `commit`."""

    commit: Callable[[tuple[Any, ...]], None] = field(default=lambda row: None)
    rows: Iterator[tuple[Any, ...]] = field(default_factory=lambda: iter(()))

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.commit(next(self.rows))
        super().append(entry, stop)

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        self.commit(next(self.rows))
        super().append_many(entries, stop)

    def finish(self, stop: Stop, counters: Counters) -> None:
        self.commit(next(self.rows))
        super().finish(stop, counters)
