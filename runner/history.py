"""The run history: read-only SQL, the stop-reason distribution, export and prune.

Every function reads the tables and the views of migration 0002 (`run_summary`,
`tool_calls`); the README documents them for the users who query them directly.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from sqlalchemy import (
    Boolean,
    ColumnElement,
    DateTime,
    Engine,
    Float,
    Integer,
    String,
    column,
    delete,
    func,
    select,
    table,
)
from sqlalchemy.engine import make_url

from runner.database import DEFERRED, open_engine, resolve_url, safe_url
from runner.errors import DatabaseUnavailable, RunnerError
from runner.schema import UtcDateTime, entries, runs
from runner.status import RunStatus
from runner.store import decode


class QueryFailed(RunnerError):
    """The database rejected a `runner sql` query (a write, or an error in the SQL)."""


# The views as SQLAlchemy sees them: declared here, created by migration 0002.
run_summary = table(
    "run_summary",
    column("id", String),
    column("agent_name", String),
    column("release", String),
    column("status", String),
    column("stop_reason", String),
    column("steps", Integer),
    column("tokens", Integer),
    column("cost", Float),
    column("resumes", Integer),
    column("wrapped_up", Boolean),
    column("created_at", DateTime(timezone=True)),
    column("finished_at", DateTime(timezone=True)),
    column("duration_seconds", Float),
    column("day", String),
)


# -- moments --------------------------------------------------------------------------------

_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_moment(text: str, *, now: datetime | None = None) -> datetime:
    """A point in time, in UTC: `2026-11-01`, `2026-11-01T12:00` (UTC unless it says
    otherwise), or an age before now such as `90d`, `12h`, `30m`, `2w`."""
    text = text.strip()
    age = _AGE.fullmatch(text)
    if age:
        delta = timedelta(**{_UNITS[age.group(2)]: float(age.group(1))})
        return (now or datetime.now(UTC)) - delta
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"not a date, a time or an age: {text!r} (try 2026-11-01, 2026-11-01T12:00, 7d)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# -- values as JSON -------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A database value as JSON: timestamps in ISO 8601, numerics as numbers."""
    if value is None or isinstance(value, bool | int | float | str | list | dict):
        return value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


# -- read-only SQL (`runner sql`) -------------------------------------------------------------


@dataclass
class QueryResult:
    """The columns of a query and its rows, fetched as they are read."""

    columns: list[str]
    rows: Iterator[tuple[Any, ...]]


_FETCH = 500


@contextmanager
def read_only_query(url: str | None, sql: str) -> Iterator[QueryResult]:
    """Run one SQL statement on a connection that the database itself keeps read-only.

    SQLite: the file is opened with `mode=ro`. PostgreSQL: the session and the transaction
    are READ ONLY, and the statement is sent as a prepared statement, which the server
    accepts only one of: no `COMMIT; SET ...` can reopen a writable transaction.
    """
    text = resolve_url(url)
    try:
        backend = make_url(text).get_backend_name()
    except Exception:
        raise DatabaseUnavailable(f"not a database URL: {safe_url(text)}") from None
    if backend == "sqlite":
        with _sqlite_query(text, sql) as result:
            yield result
    elif backend == "postgresql":
        with _postgres_query(text, sql) as result:
            yield result
    else:
        raise DatabaseUnavailable(f"runner sql reads SQLite and PostgreSQL, not {backend}")


@contextmanager
def _sqlite_query(url: str, sql: str) -> Iterator[QueryResult]:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise DatabaseUnavailable("runner sql needs a SQLite file, not an in-memory database")
    path = Path(database).resolve()
    if not path.is_file():
        raise DatabaseUnavailable(f"no SQLite database at {path}")
    connection = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=30)
    try:
        try:
            cursor = connection.execute(sql)
        except sqlite3.Error as exc:
            raise _refusal(exc) from None
        yield QueryResult(_names(cursor.description), _fetch(cursor, sqlite3.Error))
    finally:
        connection.close()


@contextmanager
def _postgres_query(url: str, sql: str) -> Iterator[QueryResult]:
    import psycopg

    engine = open_engine(url, pool=False)
    if engine.dialect.driver != "psycopg":
        raise DatabaseUnavailable("runner sql reads PostgreSQL through psycopg 3 only")
    try:
        raw = engine.raw_connection()
    except Exception as exc:
        engine.dispose()
        raise DatabaseUnavailable(f"cannot connect to {safe_url(url)}: {_first(exc)}") from None
    try:
        connection: Any = raw.driver_connection
        connection.rollback()
        connection.autocommit = True
        connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        connection.autocommit = False
        connection.read_only = True
        cursor = connection.cursor()
        # The first query takes the transaction's snapshot: after it, even the user's own
        # `SET TRANSACTION READ WRITE` is refused.
        cursor.execute("SELECT 1")
        try:
            cursor.execute(sql, prepare=True)
        except psycopg.Error as exc:
            raise _refusal(exc) from None
        yield QueryResult(_names(cursor.description), _fetch(cursor, psycopg.Error))
    finally:
        raw.close()  # rolled back and closed: the pool keeps no connection
        engine.dispose()


def _names(description: Any) -> list[str]:
    return [str(d[0]) for d in description] if description else []


def _fetch(cursor: Any, error: type[Exception]) -> Iterator[tuple[Any, ...]]:
    while True:
        try:
            batch = cursor.fetchmany(_FETCH)
        except error as exc:
            raise _refusal(exc) from None
        if not batch:
            return
        yield from (tuple(row) for row in batch)


def _refusal(exc: Exception) -> QueryFailed:
    readonly = getattr(exc, "sqlite_errorname", "") == "SQLITE_READONLY" or (
        getattr(exc, "sqlstate", None) == "25006"  # read_only_sql_transaction
    )
    if readonly:
        return QueryFailed(f"refused: runner sql is read-only ({_first(exc)})")
    if "multiple commands" in str(exc):  # PostgreSQL's words for a second statement
        return QueryFailed("query failed: runner sql runs one statement at a time")
    return QueryFailed(f"query failed: {_first(exc)}")


def _first(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# -- stop-reason distribution (`runner stats`) --------------------------------------------------

By = Literal["release", "agent", "day"]
# A rise is flagged only when chance alone would produce it less than 5% of the time.
P_FLAG = 0.05


@dataclass(frozen=True)
class Share:
    stop_reason: str
    count: int
    percent: float


@dataclass(frozen=True)
class Rise:
    """A non-final stop reason whose share rose against the previous group."""

    stop_reason: str
    percent: float
    previous_percent: float
    points: float
    p_value: float  # one-sided Fisher exact test: the chance of a rise this large by luck


@dataclass
class Group:
    """One release (of one agent), one agent or one day, with its finished runs' reasons."""

    label: str
    agent_name: str | None
    release: str | None
    day: str | None
    runs: int
    first_run_at: datetime | None
    shares: list[Share]
    previous: str | None = None
    rises: list[Rise] = field(default_factory=list)


def stop_reason_stats(
    engine: Engine,
    *,
    by: By = "release",
    since: datetime | None = None,
    agent_name: str | None = None,
    min_rise: float = 5.0,
) -> list[Group]:
    """The stop-reason distribution of finished runs per group, oldest group first.

    A group is compared with the one before it: the previous release of the same agent,
    or the previous day with runs. A reason other than `final` is flagged when its share
    rose by at least `min_rise` points and chance alone would explain it less than 5% of the
    time (a one-sided Fisher exact test, sound for small groups too). Agents are not
    compared with each other.
    """
    v = run_summary.c
    keys: Sequence[ColumnElement[Any]] = {
        "release": [v.agent_name, v.release],
        "agent": [v.agent_name],
        "day": [v.day],
    }[by]
    query = (
        select(*keys, v.stop_reason, func.count().label("n"), func.min(v.created_at))
        .where(v.status == RunStatus.FINISHED)
        .group_by(*keys, v.stop_reason)
    )
    if since is not None:
        query = query.where(v.created_at >= since.astimezone(UTC))
    if agent_name is not None:
        query = query.where(v.agent_name == agent_name)
    with engine.connect().execution_options(**{DEFERRED: True}) as connection:
        rows = connection.execute(query).all()

    grouped: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[: len(keys)]), []).append(row)
    groups = [_group(by, key, found) for key, found in grouped.items()]
    if by == "day":
        groups.sort(key=lambda g: g.day or "")
        _compare(groups, min_rise)
    elif by == "release":
        groups.sort(key=lambda g: (g.agent_name or "", g.first_run_at or datetime.min))
        for name in dict.fromkeys(g.agent_name for g in groups):
            _compare([g for g in groups if g.agent_name == name], min_rise)
    else:
        groups.sort(key=lambda g: g.agent_name or "")
    return groups


def _group(by: By, key: tuple[Any, ...], rows: list[Any]) -> Group:
    total = sum(row.n for row in rows)
    counts = sorted(((row.stop_reason or "-", row.n) for row in rows), key=lambda c: (-c[1], c[0]))
    firsts = [_utc(row[-1]) for row in rows if row[-1] is not None]
    agent = key[0] if by != "day" else None
    release = key[1] if by == "release" else None
    day = key[0] if by == "day" else None
    if by == "release":
        label = f"{agent or '-'} {release or '-'}"
    else:
        label = str((agent if by == "agent" else day) or "-")
    return Group(
        label=label,
        agent_name=agent,
        release=release,
        day=day,
        runs=total,
        first_run_at=min(firsts) if firsts else None,
        shares=[Share(reason, n, 100.0 * n / total) for reason, n in counts],
    )


def _compare(ordered: Sequence[Group], min_rise: float) -> None:
    for previous, group in pairwise(ordered):
        group.previous = previous.label
        before = {s.stop_reason: s.count for s in previous.shares}
        for share in group.shares:
            if share.stop_reason == "final":
                continue  # more answers is not a regression
            was = before.get(share.stop_reason, 0)
            points = share.percent - 100.0 * was / previous.runs
            if points < min_rise:
                continue
            p_value = _p_rise(was, previous.runs, share.count, group.runs)
            if p_value < P_FLAG:
                group.rises.append(
                    Rise(share.stop_reason, share.percent, share.percent - points, points, p_value)
                )


def _p_rise(x1: int, n1: int, x2: int, n2: int) -> float:
    """The chance that the second group gets x2 or more of the x1 + x2 cases when both
    groups share one rate (the upper tail of the hypergeometric distribution)."""
    cases, total = x1 + x2, n1 + n2
    base = _log_comb(total, n2)
    tail = 0.0
    for x in range(x2, min(cases, n2) + 1):
        term = math.exp(_log_comb(cases, x) + _log_comb(total - cases, n2 - x) - base)
        tail += term
        if term < tail * 1e-12:  # past the mode the terms only shrink
            break
    return min(1.0, tail)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


# -- export (`runner export`) ----------------------------------------------------------------

_EXPORT_BATCH = 1000


@dataclass(frozen=True)
class Exported:
    runs: int
    entries: int


def export_runs(
    engine: Engine,
    write: Callable[[str], object],
    *,
    since: datetime | None = None,
    run_ids: Sequence[str] = (),
) -> Exported:
    """Write runs, each with its journal, as JSON Lines: one run per line, oldest first.

    Memory stays bounded whatever the history's size: runs and entries come from two
    cursors read in step (server-side on PostgreSQL), and a run's line is written entry by
    entry. Both cursors read one snapshot, so a run written meanwhile is wholly in or out.
    """
    chosen = select(runs.c.id)
    if since is not None:
        chosen = chosen.where(runs.c.created_at >= since.astimezone(UTC))
    if run_ids:
        chosen = chosen.where(runs.c.id.in_(list(run_ids)))
    options: dict[str, Any] = {"yield_per": _EXPORT_BATCH}
    if engine.dialect.name == "postgresql":
        options["isolation_level"] = "REPEATABLE READ"
    else:
        options[DEFERRED] = True  # a plain BEGIN: a WAL snapshot that blocks no writer
    n_runs = n_entries = 0
    with engine.connect().execution_options(**options) as connection, connection.begin():
        run_rows = connection.execute(select(runs).where(runs.c.id.in_(chosen)).order_by(runs.c.id))
        entry_rows = iter(
            connection.execute(
                select(entries)
                .where(entries.c.run_id.in_(chosen))
                .order_by(entries.c.run_id, entries.c.seq)
            )
        )
        pending = next(entry_rows, None)
        for run in run_rows:
            head = _dumps(_run_json(run))
            # The run's fields, then its entries streamed into the same JSON object.
            write(head[:-1] + ',"entries":[')
            first = True
            while pending is not None and pending.run_id == run.id:
                write(("" if first else ",") + _dumps(_entry_json(pending)))
                first = False
                n_entries += 1
                pending = next(entry_rows, None)
            write("]}\n")
            n_runs += 1
        if pending is not None:
            raise RunnerError(f"export read an entry of run {pending.run_id} out of order")
    return Exported(n_runs, n_entries)


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_dumps = _encoder.encode


def _as_json(columns: Any, skip: str | None = None) -> Callable[[Any], dict[str, Any]]:
    """A fast row-to-JSON converter for a table: only timestamps need converting, and the
    text of content/output is decoded when its format says it is JSON."""
    names = [c.name for c in columns]
    stamps = [i for i, c in enumerate(columns) if isinstance(c.type, DateTime | UtcDateTime)]
    decoded = [
        (names.index(text), names.index(text + "_format"))
        for text in ("content", "output")
        if text in names
    ]
    keep = [i for i, name in enumerate(names) if name != skip]

    def convert(row: Any) -> dict[str, Any]:
        values = list(row)
        for i in stamps:
            if values[i] is not None:
                values[i] = plain(values[i])
        for i, fmt in decoded:
            values[i] = decode(values[i], values[fmt])
        return {names[i]: values[i] for i in keep}

    return convert


_run_json = _as_json(runs.columns)
_entry_json = _as_json(entries.columns, skip="run_id")


# -- prune (`runner prune`) ------------------------------------------------------------------


@dataclass
class Pruned:
    """What prune removed (or, on a dry run, would remove)."""

    runs: int = 0
    entries: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


def prune_runs(
    engine: Engine,
    finished_before: datetime,
    *,
    dry_run: bool = False,
    batch_size: int = 200,
) -> Pruned:
    """Delete the runs that finished before a moment, with their journals, in batches.

    Each batch is its own short transaction (other writers wait for one batch, never for
    the whole prune). A queued or running run is never touched, however old.
    """
    cutoff = finished_before.astimezone(UTC)
    old = (runs.c.status == RunStatus.FINISHED) & (runs.c.finished_at < cutoff)
    pruned = Pruned()
    if dry_run:
        with engine.connect().execution_options(**{DEFERRED: True}) as connection:
            for reason, n in connection.execute(
                select(runs.c.stop_reason, func.count()).where(old).group_by(runs.c.stop_reason)
            ):
                pruned.reasons[reason or "-"] += n
                pruned.runs += n
            pruned.entries = connection.execute(
                select(func.count())
                .select_from(entries)
                .where(entries.c.run_id.in_(select(runs.c.id).where(old)))
            ).scalar_one()
        return pruned
    while True:
        with engine.begin() as connection:
            batch = connection.execute(
                select(runs.c.id, runs.c.stop_reason)
                .where(old)
                .order_by(runs.c.finished_at)
                .limit(batch_size)
            ).all()
            if not batch:
                return pruned
            ids = [row.id for row in batch]
            pruned.entries += connection.execute(
                delete(entries).where(entries.c.run_id.in_(ids))
            ).rowcount
            pruned.runs += connection.execute(delete(runs).where(runs.c.id.in_(ids), old)).rowcount
            pruned.reasons.update(row.stop_reason or "-" for row in batch)
