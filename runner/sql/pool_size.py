"""A worker's share of database connections: how many its pool keeps, and why.

A run in flight holds a connection only while it writes, so a worker's pool is sized from
what its writers need at once and what the database can spare, never from its concurrency
alone: a thousand runs waiting for their models need a handful of connections, and
PostgreSQL's default `max_connections` is 100 for every client of the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from runner.errors import first_line
from runner.sql.backend import backend_for
from runner.sql.database import open_engine
from runner.sql.database_failures import unavailable
from runner.sql.urls import redact_url

# A worker's pool on PostgreSQL: at most this many connections, and at most a fifth of what
# the server has free (others' workers, the page and psql need theirs too).
POSTGRES_POOL_CAP = 10
POSTGRES_SHARE = 5
# On SQLite writes take turns anyway (one write lock per file): a few connections serve
# the reads that run beside them.
SQLITE_POOL_CAP = 4
# The claim loop and the heartbeat write beside the runs: a pool is never smaller than
# this, or a thread holding the only connection could wait for a second one.
POOL_FLOOR = 2


@dataclass(frozen=True)
class PoolChoice:
    """How many connections a worker keeps, and why (the worker says so at start)."""

    size: int
    reason: str

    def describe(self, concurrency: int) -> str:
        return f"pool {self.size} connections for concurrency {concurrency} ({self.reason})"


def choose_pool(url: str, concurrency: int, cap: int | None = None) -> PoolChoice:
    """The pool for a worker running `concurrency` runs at once on the database at `url`.

    Never more than the runs, the claim loop and the heartbeat could use at once; on
    PostgreSQL a modest share of the connections the server has free; `cap` if given.
    """
    needed = concurrency + POOL_FLOOR
    engine = open_engine(url, pool=False)
    try:
        if backend_for(engine.dialect.name).caps_connections:
            try:
                free, reason = _postgres_room(engine)
            except SQLAlchemyError as exc:
                # As when the runner itself cannot connect: a worker waits for its database.
                raise unavailable(
                    f"cannot open {redact_url(engine.url)}: {first_line(exc)}", exc
                ) from None
            size = min(needed, POSTGRES_POOL_CAP, max(POOL_FLOOR, free // POSTGRES_SHARE))
        else:
            size, reason = min(needed, SQLITE_POOL_CAP), "SQLite: writes take turns"
    finally:
        engine.dispose()
    if cap is not None:
        size, reason = min(size, max(cap, 1)), f"capped at {cap}; {reason}"
    return PoolChoice(size, reason)


def _postgres_room(engine: Engine) -> tuple[int, str]:
    """Connections the server has free for ordinary users, and how that was counted."""
    with engine.connect() as connection:
        limit, reserved, extra, in_use = connection.exec_driver_sql(
            "SELECT current_setting('max_connections')::int,"
            " current_setting('superuser_reserved_connections')::int,"
            # PostgreSQL 16 reserves more for pg_use_reserved_connections; older ones lack it.
            " coalesce(current_setting('reserved_connections', true), '0')::int,"
            " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        ).one()
    reserved += extra
    free = max(0, limit - reserved - in_use)
    return free, f"max_connections {limit}, {reserved} reserved, {in_use} in use"
