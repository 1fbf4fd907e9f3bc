"""The service's one door to the SQL store: the only module of `runner/service` that names
`runner.sql` (tests/unit/test_layers.py holds it). Everything else in the service reaches
storage through `runner.store.protocol`'s `RunStore`, with the contract's rows and rules.

Through it: a store opened on a URL (`open_store`), the worker's pool size (`pool_for`),
`runner list` and `show` read over a plain connection (`listed_plainly`, `shown_plainly`),
and the database as the faces meet it: which URL a command means, how a failure is worded,
the schema upgrade of `runner db upgrade`, the page's read-only engine.

Each function imports its SQL module when called: a `Runner` on an `InMemoryStore` and the
plain reads of `runner list` load no SQLAlchemy.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.sql.database`, `runner.sql.database_failures`, `runner.sql.urls`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from runner.errors import RunnerError

if TYPE_CHECKING:
    # Names for annotations only: `runner list` loads this module, and the store's contract
    # (runner.store.protocol, with everything a store's work names) would cost it ~20 ms.
    from sqlalchemy import Engine

    from runner.core.clock import Clock
    from runner.sql.heartbeat import Heartbeat as Heartbeat
    from runner.sql.key_rotation import Rotated as Rotated
    from runner.sql.pool_size import PoolChoice as PoolChoice
    from runner.sql.store import SqlStore as SqlStore
    from runner.sql.writer import Writer as Writer
    from runner.store.overview import Listed, Shown
    from runner.store.payloads import Codec
    from runner.store.protocol import RunStore


def open_store(
    url: str | None,
    *,
    connections: int | None = None,
    clock: Clock | None = None,
    lease_seconds: float,
    heartbeat_seconds: float | None = None,
    codecs: Sequence[Codec] | None = None,
) -> SqlStore:
    """The store of the database at `url` (default: the environment's, else SQLite), its
    payloads written through `codecs` and the environment's (runner.store.payload_config)."""
    from runner.sql.store import SqlStore

    return SqlStore(
        url,
        connections=connections,
        clock=clock,
        lease_seconds=lease_seconds,
        heartbeat_seconds=heartbeat_seconds,
        codecs=codecs,
    )


def sql_store(store: RunStore) -> SqlStore:
    """`store` as the SQL store it is, or RunnerError naming what it is instead."""
    from runner.sql.store import SqlStore

    if not isinstance(store, SqlStore):
        raise RunnerError(f"this runner's store is {store.describe()}, not a database")
    return store


def pool_for(url: str | None, concurrency: int, cap: int | None = None) -> PoolChoice:
    """How many connections a worker running `concurrency` runs at once keeps."""
    from runner.sql.pool_size import choose_pool

    return choose_pool(resolve_url(url), concurrency, cap=cap)


def listed_plainly(url: str | None, **filters: Any) -> Listed | None:
    """What `runner list` shows, read over a plain connection (runner.sql.plain_overview);
    None where none opens (the caller reads through a `Runner`)."""
    from runner.sql.plain_overview import listed_plainly as listed

    return listed(url, **filters)


def shown_plainly(url: str | None, run_id: str) -> Shown | None:
    """What `runner show` shows of a run, read likewise (None: read through a `Runner`)."""
    from runner.sql.plain_overview import shown_plainly as shown

    return shown(url, run_id)


def resolve_url(url: str | None) -> str:
    """The URL a command means: `url` (--db), else RUNNER_DATABASE_URL, else ./runner.db."""
    from runner.sql.urls import resolve_url as resolved

    return resolved(url)


def redact_url(url: Any) -> str:
    """`url` with its password hidden, to show."""
    from runner.sql.urls import redact_url as redacted

    return redacted(url)


def failure_message(url: Any, exc: BaseException) -> str:
    """What a face says of a database failure (`exc`) at `url`: one line, no traceback."""
    from runner.sql.database import failure_message as message

    return message(url, exc)


def open_read_only(url: str | None = None) -> Engine:
    """An engine that only reads (the page's), on a database at the schema's head."""
    from runner.sql.database import open_read_only as opened

    return opened(url)


def upgrade_database(url: str | None = None) -> str:
    """Bring the database at `url` to the schema's head (`runner db upgrade`)."""
    from runner.sql.database import upgrade_database as upgraded

    return upgraded(url)


__all__ = [
    "failure_message",
    "listed_plainly",
    "open_read_only",
    "open_store",
    "pool_for",
    "redact_url",
    "resolve_url",
    "shown_plainly",
    "sql_store",
    "upgrade_database",
]


def rotate_keys(
    url: str | None, *, batch_size: int = 200, progress: Callable[[Rotated], None] | None = None
) -> Rotated:
    """Seal again, with the key ring's newest key, every payload of the database at `url`
    encrypted with an older one (runner.sql.key_rotation), in batches, while workers run."""
    from runner.sql.database import connect, resolve_url
    from runner.sql.key_rotation import rotate
    from runner.store.payload_config import configured

    engine = connect(url)
    try:
        return rotate(
            engine, configured(resolve_url(url)), batch_size=batch_size, progress=progress
        )
    finally:
        engine.dispose()
