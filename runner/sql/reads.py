"""The reads of runs and journals, each written once as plain SQL over a DB-API connection.

`runner list` and `show` read without SQLAlchemy (importing it is most of their start-up):
runner.sql.plain_connection opens sqlite3 or psycopg and hands the connection to these
functions. The library reads the same way, given the driver connection beneath one of its
engine's connections (`plain_reading`, `plain`, at the end of this module): each of these
reads has one implementation, whichever way the database was opened.

The SQL is written with `:name` binds (sqlite3's style) and rewritten once per statement
for psycopg (`%(name)s`). Values come back as SQLAlchemy's column types of
runner.sql.schema give them: timestamps aware and in UTC (SQLite keeps them as UTC
text), JSON columns decoded (SQLite keeps text; psycopg decodes `json` itself), booleans
bool (SQLite keeps 0 and 1).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.errors import AmbiguousRunId, RunNotFound
from runner.sql import libpq
from runner.store.rows import RunRow, entry_of
from runner.store.scores import ScoreRow, score_row

if TYPE_CHECKING:  # SQLAlchemy is never imported here: `runner list` reads without it
    from sqlalchemy import Connection, Engine

# The Alembic revision runner's tables are at: the newest in migrations/ (tests/migrations
# asserts it is the head; a new revision must change it). Every command checks a database
# against it with the one SELECT below instead of loading Alembic (a tenth of a second).
SCHEMA_REVISION = "0026"
VERSION_QUERY = "SELECT version_num FROM alembic_version"
# PostgreSQL's clock, the one leases are measured on (the clock of the moment, not of the
# transaction's start). Read by `database_now`, runner.sql.backend's DatabaseClock too.
NOW_QUERY = "SELECT clock_timestamp() AS now"

# The columns a RunRow is built from (runs.stalled_resumes and progress_seq are the
# claim's own), and those of a journal entry with where it sits and who wrote it.
RUN_FIELDS = (
    "id", "agent", "agent_name", "release", "task", "budgets", "status", "stop_reason",
    "output", "output_format", "error", "wrapped_up", "steps", "tokens", "cost", "resumes",
    "deadline", "cancel_requested", "lease_owner", "lease_epoch", "lease_expires_at",
    "leased_at", "created_at", "updated_at", "finished_at", "last_seen_at", "forked_from_id",
    "forked_at_step", "waiting_since", "wait_expires_at", "queue", "priority", "not_before",
    "parent_id", "root_id", "parent_call_key", "below_steps", "below_tokens", "below_cost",
    "undelivered_messages", "parked_reason",
)  # fmt: skip
ENTRY_FIELDS = (
    "run_id", "seq", "step", "kind", "content", "content_format", "action_type", "tool",
    "args", "is_error", "error", "idempotency_key", "attempt", "usage_tokens", "usage_cost",
    "steps", "tokens", "cost", "error_streak", "lease_epoch", "created_at", "waits_for",
    "answer", "answered_by", "call_id",
)  # fmt: skip
# Decoded by name wherever a read selects them (every read here names its columns so).
_TIMESTAMPS = frozenset(
    {
        "deadline", "lease_expires_at", "leased_at", "created_at", "updated_at",
        "finished_at", "last_seen_at", "waiting_since", "wait_expires_at", "not_before", "now",
    }
)  # fmt: skip
_JSON = frozenset({"budgets", "args"})
_BOOLEANS = frozenset({"wrapped_up", "cancel_requested", "is_error"})
# SQLAlchemy's storage format of a timestamp on SQLite (its DATETIME type's): UTC, naive.
_SQLITE_TIME = "%04d-%02d-%02d %02d:%02d:%02d.%06d"
# At most this many ids in one IN list (SQLite's limit of binds is far above it).
_CHUNK = 500
# Rows taken from the driver at a time by `Reader.each`.
_FETCH = 500
_BIND = re.compile(r"(?<![:\w]):(\w+)")


def like_prefix(prefix: str) -> str:
    """The LIKE pattern (with ESCAPE '\\') of the values that start with `prefix`: its own
    % and _ taken literally."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@lru_cache(maxsize=256)
def _pyformat(sql: str) -> str:
    """`sql` with psycopg's binds for sqlite3's (`:name` as `%(name)s`, `%` as `%%`)."""
    return _BIND.sub(r"%(\1)s", sql.replace("%", "%%"))


def utc(value: Any) -> datetime | None:
    """A timestamp as runner.sql.schema's UtcDateTime gives it back: aware, in UTC."""
    if value is None:
        return None
    if isinstance(value, str):  # SQLite's text, as SQLAlchemy parses it
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
    return value.astimezone(UTC)  # type: ignore[no-any-return]


class Reader:
    """A DB-API connection (sqlite3's or psycopg's) and how its driver takes binds and gives
    values back. It runs plain SELECTs; it never begins, commits or closes anything it was
    given (`close` is for the connections runner.sql.plain_connection opened for it)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        # sqlite3 is loaded if the connection is its own (on PostgreSQL it need not be).
        sqlite3 = sys.modules.get("sqlite3")
        self.sqlite = sqlite3 is not None and isinstance(connection, sqlite3.Connection)
        self.statement: str | None = None  # the last one run, for an error's message

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """The driver's errors (not SQLAlchemy's: none wraps them here)."""
        if self.sqlite:
            return (sys.modules["sqlite3"].Error,)
        if isinstance(self.connection, libpq.Connection):
            return (libpq.Error,)
        return (sys.modules["psycopg"].Error,)  # loaded: the connection is psycopg's

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The rows of one SELECT, each by column name, decoded (see the module's doc)."""
        return list(self.each(sql, params))

    def each(self, sql: str, params: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """The rows of one SELECT as `rows` gives them, one at a time, fetched a batch at a
        time: a caller that keeps something smaller than the row (a journal's entries) never
        holds every row as the driver gave it and decoded beside what it keeps."""
        self.statement = sql
        cursor = self.connection.cursor()
        try:
            cursor.execute(sql if self.sqlite else _pyformat(sql), params or {})
            names = [column[0] for column in cursor.description]
            times = [i for i, name in enumerate(names) if name in _TIMESTAMPS]
            texts = [i for i, name in enumerate(names) if name in _JSON] if self.sqlite else []
            flags = [i for i, name in enumerate(names) if name in _BOOLEANS] if self.sqlite else []
            while fetched := cursor.fetchmany(_FETCH):
                for values in fetched:
                    row = dict(zip(names, values, strict=True))
                    for i in times:
                        row[names[i]] = utc(values[i])
                    for i in texts:
                        if values[i] is not None:
                            row[names[i]] = json.loads(values[i])
                    for i in flags:
                        if values[i] is not None:
                            row[names[i]] = bool(values[i])
                    yield row
        finally:
            cursor.close()

    def when(self, value: datetime) -> Any:
        """A timestamp as a bind, as UtcDateTime binds it: UTC (SQLite: its stored text)."""
        if value.tzinfo is None:
            raise ValueError(f"a naive datetime cannot be stored as UTC: {value!r}")
        at = value.astimezone(UTC)
        if not self.sqlite:
            return at
        return _SQLITE_TIME % (
            at.year, at.month, at.day, at.hour, at.minute, at.second, at.microsecond
        )  # fmt: skip

    def database_error(
        self, exc: Exception, *, dialect: Any = None, invalidated: bool = False
    ) -> Exception:
        """The driver's `exc` as SQLAlchemy's error around it: the class (OperationalError,
        ProgrammingError, ...) an engine's connection raises for it, which every caller and
        the CLI's one-line errors know. SQLAlchemy is imported here, on a failure only."""
        from sqlalchemy.exc import DBAPIError

        return DBAPIError.instance(
            self.statement, None, exc, self.errors[0],
            connection_invalidated=invalidated, dialect=dialect,
        )  # fmt: skip

    def close(self) -> None:
        self.connection.close()


# -- the reads ------------------------------------------------------------------------------


def schema_at_head(reader: Reader) -> bool:
    """Whether the schema is at SCHEMA_REVISION (the driver's error if it cannot be read)."""
    return [row["version_num"] for row in reader.rows(VERSION_QUERY)] == [SCHEMA_REVISION]


def database_now(reader: Reader) -> datetime:
    """The database server's clock (PostgreSQL's: the one leases are measured on)."""
    now = utc(reader.rows(NOW_QUERY)[0]["now"])
    assert now is not None
    return now


def list_runs(
    reader: Reader,
    *,
    status: RunStatus | None = None,
    stop_reason: str | None = None,
    release: str | None = None,
    limit: int = 20,
    schedule: str | None = None,
    lease_expired_at: datetime | None = None,
    lease_live_at: datetime | None = None,
    owner_prefix: str | None = None,
) -> list[RunRow]:
    """Runs, newest first. `lease_expired_at`: only those whose lease ran out by then (or
    that have none); `lease_live_at`: only those whose lease lasts past it; `owner_prefix`:
    only those held by an owner whose name starts so (a host's processes)."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    if status:
        where.append("status = :status")
        params["status"] = str(status)
    if stop_reason:
        where.append("stop_reason = :stop_reason")
        params["stop_reason"] = str(stop_reason)
    if release:
        where.append("release = :release")
        params["release"] = release
    if schedule:
        where.append("schedule = :schedule")
        params["schedule"] = schedule
    if lease_expired_at is not None:
        where.append("(lease_expires_at IS NULL OR lease_expires_at < :expired_at)")
        params["expired_at"] = reader.when(lease_expired_at)
    if lease_live_at is not None:
        where.append("lease_expires_at >= :live_at")
        params["live_at"] = reader.when(lease_live_at)
    if owner_prefix is not None:
        # LIKE, not a function of the column: an index on it would serve the prefix.
        where.append("lease_owner LIKE :owner ESCAPE '\\'")
        params["owner"] = like_prefix(owner_prefix)
    sql = (
        f"SELECT {', '.join(RUN_FIELDS)} FROM runs"
        + (f" WHERE {' AND '.join(where)}" if where else "")
        + " ORDER BY created_at DESC, id DESC LIMIT :limit"
    )
    return [RunRow.of(row) for row in reader.rows(sql, params)]


def tree_runs(reader: Reader, root_id: str, limit: int) -> list[RunRow]:
    """The runs of the tree rooted at `root_id` (the root's own row included), oldest
    first, at most `limit`: one range of the index on (root_id, created_at)."""
    sql = (
        f"SELECT {', '.join(RUN_FIELDS)} FROM runs WHERE root_id = :root"
        " ORDER BY created_at, id LIMIT :limit"
    )
    return [RunRow.of(row) for row in reader.rows(sql, {"root": root_id, "limit": limit})]


def last_entries(reader: Reader, run_ids: Sequence[str]) -> dict[str, tuple[Counters, datetime]]:
    """The counters after each run's last journal entry, and when it was written: the
    counters so far of an unfinished run (its row holds them only once it finishes)."""
    found: dict[str, tuple[Counters, datetime]] = {}
    for at in range(0, len(run_ids), _CHUNK):
        chunk = run_ids[at : at + _CHUNK]
        ids = {f"id_{i}": run_id for i, run_id in enumerate(chunk)}
        sql = (
            "SELECT e.run_id AS run_id, e.steps AS steps, e.tokens AS tokens, e.cost AS cost, "
            "e.error_streak AS error_streak, e.created_at AS created_at FROM entries e "
            "JOIN (SELECT run_id, max(seq) AS seq FROM entries "
            f"WHERE run_id IN ({', '.join(':' + name for name in ids)}) GROUP BY run_id) last "
            "ON e.run_id = last.run_id AND e.seq = last.seq"
        )
        for row in reader.rows(sql, ids):
            counters = Counters(row["steps"], row["tokens"], row["cost"], row["error_streak"])
            found[row["run_id"]] = (counters, row["created_at"])
    return found


def last_entry(reader: Reader, run_id: str) -> tuple[Entry, int, datetime] | None:
    """The run's last journal entry, its seq and when it was written; None if it has none.
    One primary-key probe (the run's entries in seq order, read from the end)."""
    rows = reader.rows(
        f"SELECT {', '.join(ENTRY_FIELDS)} FROM entries WHERE run_id = :run_id "
        "ORDER BY seq DESC LIMIT 1",
        {"run_id": run_id},
    )
    if not rows:
        return None
    row = rows[0]
    return entry_of(row), row["seq"], row["created_at"]


# The kinds of a waiting run's last rows: its step's waits and the answers given so far.
_WAIT_KINDS = (EntryKind.WAIT, EntryKind.ANSWER)
_TAIL_PAGE = 16


def wait_rows(reader: Reader, run_id: str) -> list[tuple[Entry, int, datetime]]:
    """The waits and answers the run's journal ends with (each with its seq and when it was
    written), in order: those of a step that waits, or waited, for people. Empty if the
    journal ends otherwise. Read from the end along the primary key, a page at a time."""
    tail: list[tuple[Entry, int, datetime]] = []
    before: int | None = None
    while True:
        params: dict[str, Any] = {"run_id": run_id}
        bound = ""
        if before is not None:
            params["before"], bound = before, " AND seq < :before"
        rows = reader.rows(
            f"SELECT {', '.join(ENTRY_FIELDS)} FROM entries WHERE run_id = :run_id{bound} "
            f"ORDER BY seq DESC LIMIT {_TAIL_PAGE}",
            params,
        )
        for row in rows:
            entry = entry_of(row)
            if entry.kind not in _WAIT_KINDS:
                tail.reverse()
                return tail
            tail.append((entry, row["seq"], row["created_at"]))
        if len(rows) < _TAIL_PAGE:
            tail.reverse()
            return tail
        before = rows[-1]["seq"]


def get_run(reader: Reader, run_id: str) -> RunRow:
    """The run with this id (RunNotFound if there is none)."""
    rows = reader.rows(f"SELECT {', '.join(RUN_FIELDS)} FROM runs WHERE id = :id", {"id": run_id})
    if not rows:
        raise RunNotFound(f"no run with id {run_id}")
    return RunRow.of(rows[0])


def find_run(reader: Reader, prefix: str) -> RunRow:
    """The run whose id is `prefix`, or the only one whose id starts with it."""
    if not prefix.strip():
        # Every id starts with the empty prefix: `runner cancel ""` cancelled the only run.
        raise ValueError("a run id (or a prefix of one) cannot be empty")
    columns = ", ".join(RUN_FIELDS)
    exact = reader.rows(f"SELECT {columns} FROM runs WHERE id = :id", {"id": prefix})
    if exact:
        return RunRow.of(exact[0])
    # SQLite's LIKE ignores ASCII case, PostgreSQL's does not: the substr test keeps a
    # prefix as case-sensitive as the ids it abbreviates, on both. LIKE, not substr alone:
    # the primary key's index serves it.
    rows = reader.rows(
        f"SELECT {columns} FROM runs WHERE id LIKE :pattern ESCAPE '\\' "
        "AND substr(id, 1, :length) = :prefix LIMIT 2",
        {"pattern": like_prefix(prefix), "length": len(prefix), "prefix": prefix},
    )
    if not rows:
        raise RunNotFound(f"no run with id {prefix}")
    if len(rows) > 1:
        raise AmbiguousRunId(f"more than one run id starts with {prefix}: give more of it")
    return RunRow.of(rows[0])


def load_entries(
    reader: Reader, run_id: str, kinds: Sequence[EntryKind] = ()
) -> list[tuple[Entry, int]]:
    """A run's journal in order (only the entries of `kinds`, if given), each entry with the
    lease epoch that wrote it."""
    params: dict[str, Any] = {"run_id": run_id}
    only = ""
    if kinds:
        params.update({f"kind_{i}": str(kind) for i, kind in enumerate(kinds)})
        only = f" AND kind IN ({', '.join(f':kind_{i}' for i in range(len(kinds)))})"
    rows = reader.each(
        f"SELECT {', '.join(ENTRY_FIELDS)} FROM entries WHERE run_id = :run_id{only} ORDER BY seq",
        params,
    )
    # Each row becomes its entry as it comes: a long journal is never in memory twice.
    return [(entry_of(row), row["lease_epoch"]) for row in rows]


def entries_after(reader: Reader, run_id: str, after: int, limit: int) -> list[tuple[int, Entry]]:
    """At most `limit` of the run's journal entries after position `after` (their seq), in
    order, each with its position: a range of the primary key (run_id, seq), so a follower
    polling an idle run costs one index probe."""
    rows = reader.rows(
        f"SELECT {', '.join(ENTRY_FIELDS)} FROM entries WHERE run_id = :run_id "
        "AND seq > :after ORDER BY seq LIMIT :limit",
        {"run_id": run_id, "after": after, "limit": limit},
    )
    return [(row["seq"], entry_of(row)) for row in rows]


def existing_runs(reader: Reader, run_ids: Sequence[str]) -> dict[str, RunRow]:
    """The runs among `run_ids` that exist, by id."""
    found: dict[str, RunRow] = {}
    for at in range(0, len(run_ids), _CHUNK):
        ids = {f"id_{i}": run_id for i, run_id in enumerate(run_ids[at : at + _CHUNK])}
        sql = (
            f"SELECT {', '.join(RUN_FIELDS)} FROM runs "
            f"WHERE id IN ({', '.join(':' + name for name in ids)})"
        )
        for row in reader.rows(sql, ids):
            found[row["id"]] = RunRow.of(row)
    return found


# -- beneath an engine's connection ---------------------------------------------------------


@contextmanager
def plain_reading(engine: Engine) -> Iterator[Reader]:
    """The driver's connection beneath one of the engine's, for the reads here. Its
    statements are plain SELECTs in no transaction of SQLAlchemy's; the pool rolls back
    whatever the driver began when the connection goes back."""
    with engine.connect() as connection, plain(connection) as reader:
        yield reader


@contextmanager
def plain(connection: Connection) -> Iterator[Reader]:
    """The driver's connection beneath `connection`, inside its transaction (a read there
    sees what the transaction wrote). A driver's error comes out as SQLAlchemy's own would
    (every caller, and the CLI's one-line errors, know those), a lost connection discarded."""
    dbapi_connection = connection.connection.dbapi_connection
    reader = Reader(dbapi_connection)
    try:
        yield reader
    except reader.errors as exc:
        dialect = connection.dialect
        lost = dialect.is_disconnect(exc, dbapi_connection, None)  # type: ignore[arg-type]
        if lost:
            connection.invalidate(exc)
        raise reader.database_error(exc, dialect=dialect, invalidated=lost) from exc


def run_scores(reader: Reader, run_id: str) -> list[ScoreRow]:
    """The run's scores by name (`runner show` reads them so), whatever their status."""
    rows = reader.rows(
        "SELECT run_id, name, status, value, note, source, attempts, created_at, scored_at "
        "FROM scores WHERE run_id = :run_id ORDER BY name",
        {"run_id": run_id},
    )
    return [
        score_row({**row, "created_at": utc(row["created_at"]), "scored_at": utc(row["scored_at"])})
        for row in rows
    ]
