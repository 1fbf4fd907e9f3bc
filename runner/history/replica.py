"""History read on a streaming replica (`--read-db`, RUNNER_READ_DATABASE_URL): how far
behind it is, said wherever its reads are shown (`runner stats`, `export`, the page and the
API), since a replica answers with what it has replayed, not what the primary holds."""

from __future__ import annotations

from sqlalchemy import Engine

from runner.sql.backend import backend_for
from runner.sql.urls import resolve_read_url as resolve_read_url  # re-exported


def replica_lag(engine: Engine) -> float | None:
    """Seconds the database of `engine` is behind its primary; None if it is no replica."""
    with engine.connect() as connection:
        return backend_for(engine.dialect.name).replica_lag(connection)


def lag_words(lag: float) -> str:
    """A replica's lag for a person: `read from a replica 0.3 s behind its primary`."""
    return f"read from a replica {lag:.1f} s behind its primary"
