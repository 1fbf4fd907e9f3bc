"""Every difference between SQLite and PostgreSQL, in one object chosen from the URL.

The rest of the store writes portable SQLAlchemy; where the two databases truly differ
(how an engine is set up, how a write transaction begins, the fenced journal write, plain
and snapshot reads, whose clock leases are measured on, how migrations are serialised,
which errors mean a damaged database, how idle workers are woken) it asks
`backend_for(...)`. `runner sql`'s read-only connections, a whole idea each, are
`runner.history.sqlite_reader` and `postgres_reader`, picked by `runner.history.query`.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote
from weakref import WeakKeyDictionary

from sqlalchemy import (
    Engine,
    Insert,
    Table,
    Update,
    bindparam,
    case,
    create_engine,
    event,
    false,
    insert,
    literal_column,
    null,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError

from runner.core.clock import STEADY, SYSTEM, Clock, SteadyClock
from runner.defaults import BUSY_TIMEOUT_MS as BUSY_TIMEOUT_MS  # re-exported
from runner.errors import DatabaseRefused
from runner.sql.reads import database_now, plain
from runner.sql.schema import entries, for_postgresql, runs
from runner.store.rows import ENTRY_COLUMNS

# `synchronous=FULL` is the default: a commit that survives only a process crash, not a
# power loss, could let an idempotency key be reused for a different call. NORMAL is opt-in.
SYNCHRONOUS_MODES = ("full", "normal")
WAL_SWITCH_RETRY_SECONDS = 0.005
# A pooled PostgreSQL connection idle longer than this is pinged before it is used again.
PING_AFTER_IDLE_SECONDS = 1.0
# Ask for a DEFERRED transaction (a plain read) with execution_options(sqlite_deferred=True).
DEFERRED = "sqlite_deferred"

# The advisory lock key of runner's migrations on PostgreSQL: "runner" in ASCII.
MIGRATION_LOCK = 0x72756E6E6572

# psycopg's pq.TransactionStatus.IDLE: no transaction open (not imported: SQLite's users
# never load psycopg).
_IDLE = 0

# The channel on which a run queued (submitted, answered, given back) is announced.
WAKE_CHANNEL = "runner_wake"
# The channel on which a followed run's write is announced, the run's id as the payload
# (sent by the triggers of revision 0017; see runner.sql.follows).
FOLLOW_CHANNEL = "runner_follow"


class Listening(Protocol):
    """A connection of its own that hears a channel's notifications (PostgreSQL LISTEN)."""

    def wait(self, timeout: float) -> list[str]:
        """Block until something is announced or `timeout` seconds pass: the payloads heard
        (every one pending, in order), none if the time passed."""
        ...

    def close(self) -> None: ...


class Backend:
    """What one database needs done its own way. Subclasses hold the two real ones."""

    def thread_bound(self, url: URL) -> bool:
        """Whether only the thread that opened the database at `url` can see it."""
        return False

    name: str
    title: str  # the database's name for people
    # Whether `runner` may migrate a brand-new, empty database by itself on first use.
    migrates_fresh_files = False
    # Whether a fenced journal write also renews the lease (once a third of it is spent).
    writes_renew_lease = False
    # Whether idle workers can be woken when a run is queued (else they only poll).
    notifies = False
    # Whether several runs' journal entries can go in one statement (fenced_insert_runs).
    writes_runs_together = False
    # Whether a write's round trips cost more than its statements: a limit's settle riding
    # in a journal write goes in the fenced insert's statement, as a CTE (limit_rides).
    settles_in_insert = False
    # Whether a journal write's reservation of its run's next model call goes in the fenced
    # insert's statement too (runner.sql.reserving): a transaction that reserves from a
    # limit then marks its row (`limits.changes`, bumped under the lock) for that statement
    # to check. PostgreSQL; on SQLite one writer at a time orders them all anyway.
    reserves_in_insert = False
    # Whether a limit's settled calls are summed by the second by triggers (revision 0026,
    # `limit_seconds`), and its minute read from those sums: PostgreSQL, which read every
    # call of a busy limit's minute from the table; SQLite sums them from a covering index.
    sums_by_second = False
    # Whether a run's last write ends the run in its fenced insert's statement (one round
    # trip, `fenced_insert_finishing`), rather than in an UPDATE after it in the write's
    # transaction: PostgreSQL, where each statement, BEGIN and COMMIT is a round trip.
    finishes_in_insert = False
    # Whether the database takes one writer at a time per file, so a process's writers
    # take turns on a lock of its own first (runner.sql.writer): SQLite.
    one_writer_per_file = False
    # Whether a tree's reservations take a lock of their own (an advisory lock): on SQLite,
    # BEGIN IMMEDIATE already holds the whole file (runner.sql.tree_budget).
    locks_trees = False
    # What a read of one run's row adds to lock it until the transaction ends (SQLite's
    # BEGIN IMMEDIATE holds the whole file already).
    row_lock = ""
    # Whether writes of a sub-agent's call that go together share a statement as
    # data-modifying CTEs, each statement being a round trip: a parent's park with its
    # first child and the child's task (runner.sql.parking), a parent's answer with its
    # claim back (runner.sql.take_back). PostgreSQL.
    writes_in_ctes = False
    # Whether the server caps its connections, so a worker's pool leaves room under the cap
    # (runner.sql.pool_size asks PostgreSQL how many are free).
    caps_connections = False
    # Whether the journal is partitioned by month (revision 0022, runner.sql.partitions):
    # PostgreSQL.
    partitions_journal = False
    # Whether a claim passes over a run another transaction holds (SKIP LOCKED), rather
    # than wait for it: PostgreSQL (runner.sql.runnable.due_queued).
    claims_pass_held = False

    def create_engine(
        self,
        url: URL,
        kwargs: dict[str, Any],
        *,
        idle_transactions: float | None = None,
        direct: URL | None = None,
    ) -> Engine:
        """An engine for `url`; with `idle_transactions`, the server (if it has sessions of
        its own) ends one left idle inside a transaction that many seconds. `direct`: `url`
        is a pooler in transaction mode, and `direct` the server itself (see
        PostgresBackend)."""
        raise NotImplementedError

    def read_only_engine(self, url: URL, direct: URL | None = None) -> Engine:
        """An engine whose connections the database itself keeps read-only (the page's)."""
        raise NotImplementedError

    def fenced_insert(self, rows: int = 1) -> Insert:
        """INSERT entries only while the run's epoch is this worker's, in ONE statement.

        It returns a row per entry written (with the run's cancel flag and its count of
        undelivered messages, read for free, so the loop needs no query of its own to notice
        a cancel or a message) and none when fenced out.
        The entry's values are bound by column name (`name_<i>` for entry i when `rows` is
        more than 1: the calls of a step of several), the fence's as `fence_*`.
        """
        raise NotImplementedError

    def fenced_insert_quiet(self, rows: int = 1) -> Insert | None:
        """`fenced_insert` that returns nothing and writes only while the run has heard
        nothing either (no cancel asked, no message undelivered): bound exactly as
        `fenced_insert`, so that the caller tries it first with the same values and learns
        all it needs from its row count; on none written it runs `fenced_insert` in the same
        transaction, to learn why. None where reading back costs a backend nothing more."""
        return None

    def fenced_insert_finishing(self, rows: int, finished: dict[str, Any]) -> Insert:
        """`fenced_insert`, that also ends the run in the same statement: `finished` (its
        columns' new values, binds) set on its row and its lease let go, while its epoch is
        this worker's. Only where `finishes_in_insert`."""
        raise NotImplementedError

    def fenced_insert_runs(self, ends: tuple[str, ...] = ()) -> str | None:
        """The entries of several runs in ONE statement, each row fenced by its own run's
        epoch (a group commit of one statement): its SQL for the driver, or None where the
        backend has none (SQLite shares a transaction instead: runner.sql.group_commit).

        Bound as ONE parameter, `batch`: a JSON array of the rows, each an object of the
        entry's values by column name (a JSON column's value as its JSON text) and
        `fence_expiry`, `fence_renew_after` (its run's lease renewal), so one text, prepared
        once by the server, serves any number of rows, and the driver adapts one string
        rather than each value of an array. It returns a row (run_id, seq, cancel flag,
        undelivered messages) per entry written: a run with none was fenced out.

        With `ends` (columns of `runs`), a second parameter, `ends`: a JSON array of the runs
        whose last write is in the batch, each its `run_id` and those columns' values (a
        run's end, as `fenced_insert_finishing` sets it), ended in the same statement.
        """
        return None

    def insert_entries(self) -> str | None:
        """Entries' rows inserted by ONE statement bound with ONE parameter, `batch` (a JSON
        array of the rows, as `fenced_insert_runs` takes them, with no fence: the caller's
        transaction holds the runs' rows), for the driver: its SQL, or None where the
        backend has none (SQLite: SQLAlchemy's INSERT of many rows). A batch claim journals
        its fresh runs' tasks with it (runner.sql.leases)."""
        return None

    def json_text(self, dbapi_connection: Any) -> Callable[[Any], str | None]:
        """How the driver of `dbapi_connection` writes a JSON column's bound value (as its
        bind processor made it) as text: `fenced_insert_runs` carries that text in its
        batch, byte for byte what a row's own write sends. Only where that statement is."""
        raise NotImplementedError

    def begin_write(
        self, execute: Callable[[str], None], dbapi_connection: Any, one_statement: bool
    ) -> bool:
        """Begin a journal write on the driver's own cursor (see runner.driver): `execute`
        runs a statement there.

        True when it switched the driver connection to autocommit (a write of
        `one_statement`, which is then its own transaction): `end_write` switches it back.
        """
        return False

    def end_write(self, dbapi_connection: Any) -> None:
        """Undo what `begin_write` switched, once the write has ended."""

    def left_to_commit(self, dbapi_connection: Any) -> bool:
        """Whether a write's statements left a transaction for its COMMIT to end (not one
        run in autocommit, committed as it ran)."""
        return True

    # The statement that begins every write transaction on a driver connection, where one
    # does and nothing else is switched (`begin_write`): a write may then run it itself.
    write_begins_with: str | None = None

    def read_options(self) -> dict[str, Any]:
        """Execution options for a connection that only reads."""
        return {}

    def is_corrupt(self, exc: BaseException) -> bool:
        """Whether `exc` (a driver's error, or SQLAlchemy's around one) says the database is
        damaged: an error that no retry mends, unlike a server that is away for a while."""
        return False

    def lock_migrations(self, connection: Connection) -> None:
        """Hold, until `connection`'s transaction ends, the lock that serialises migrations.

        SQLite needs none: the migration's transaction is BEGIN IMMEDIATE, one at a time.
        """

    def snapshot_options(self) -> dict[str, Any]:
        """Execution options for a transaction whose reads all see one snapshot."""
        return {}

    def clock(self, engine: Engine, base: Clock = SYSTEM) -> Clock:
        """The clock leases are measured on: one that every worker of this database shares.
        On SQLite, this machine's, steadied (a step of its wall clock would make every live
        lease look expired at once): see SteadyClock."""
        return STEADY if base is SYSTEM else SteadyClock(base)

    def wake_workers(self, connection: Connection) -> None:
        """Announce, when `connection`'s transaction commits, that a run became runnable."""

    def listen(self, engine: Engine, channel: str = WAKE_CHANNEL) -> Listening | None:
        """A new connection that hears `channel`'s announcements (by default, the runs
        queued); None where there are none to hear (workers and followers poll)."""
        return None

    def refresh_statistics(self, connection: Connection) -> None:
        """Tell the planner how many runs there are now (after a bulk submit)."""

    def replica_lag(self, connection: Connection) -> float | None:
        """Seconds the database behind `connection` is behind its primary, if it is a
        streaming replica (0 when it has replayed all it received); None if it is none."""
        return None


def _entry_values(row: int | None = None) -> list[Any]:
    suffix = "" if row is None else f"_{row}"
    return [bindparam(name + suffix, type_=entries.c[name].type) for name in ENTRY_COLUMNS]


def _values_from(source: Any, rows: int, where: Any = None) -> Any:
    """The entries' values SELECTed from `source`: one SELECT, or one per entry (UNION ALL)."""

    def one(row: int | None) -> Any:
        chosen = select(*_entry_values(row)).select_from(source)
        return chosen if where is None else chosen.where(where)

    return one(None) if rows == 1 else union_all(*(one(i) for i in range(rows)))


def _fence() -> Any:
    return (runs.c.id == bindparam("fence_run")) & (runs.c.lease_epoch == bindparam("fence_epoch"))


class SqliteBackend(Backend):
    """The embedded default: WAL, `synchronous=FULL`, a busy timeout, BEGIN IMMEDIATE."""

    name = "sqlite"
    title = "SQLite"
    migrates_fresh_files = True
    one_writer_per_file = True

    def thread_bound(self, url: URL) -> bool:
        # An in-memory database is one per thread's connection.
        return url.database in (None, "", ":memory:")

    def create_engine(
        self,
        url: URL,
        kwargs: dict[str, Any],
        *,
        idle_transactions: float | None = None,
        direct: URL | None = None,
    ) -> Engine:
        # idle_transactions: one process at a time writes a SQLite file, under its lock.
        # direct: no pooler stands between a process and its file.
        synchronous = str(url.query.get("synchronous", "full")).lower()
        if synchronous not in SYNCHRONOUS_MODES:
            raise DatabaseRefused(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, not {synchronous!r}"
            )
        url = url.difference_update_query(["synchronous"])
        if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
            folder = Path(url.database).parent
            if not folder.is_dir():
                raise DatabaseRefused(f"no such folder for the SQLite file: {folder}")
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000}, **kwargs)
        _adapt_none_at_once()

        @event.listens_for(engine, "connect")
        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take transaction control from the sqlite3 module, so BEGIN IMMEDIATE is ours.
            dbapi_connection.isolation_level = None
            _enable_wal(dbapi_connection)
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def on_begin(connection: Connection) -> None:
            # IMMEDIATE takes the write lock up front: two writers never deadlock upgrading a
            # read lock, and a claim or a fenced write sees the latest committed state.
            deferred = connection.get_execution_options().get(DEFERRED, False)
            connection.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")

        return engine

    def read_only_engine(self, url: URL, direct: URL | None = None) -> Engine:
        # The file opened with mode=ro (an SQLite URI): no statement on these connections
        # can write, whatever it says. Every transaction is a plain BEGIN (BEGIN IMMEDIATE
        # asks for the write lock, which a read-only connection cannot take).
        database = url.database
        if not database or database == ":memory:":
            raise DatabaseRefused("a read-only connection needs a SQLite file, not memory")
        path = Path(database).resolve()
        if not path.is_file():
            raise DatabaseRefused(f"no SQLite database at {path}")
        readonly = url.set(database=f"file:{quote(str(path))}").update_query_dict(
            {"mode": "ro", "uri": "true"}
        )
        return self.create_engine(readonly, {}).execution_options(**{DEFERRED: True})

    def fenced_insert(self, rows: int = 1) -> Insert:
        # SELECT ... FROM runs WHERE <fence> rather than WHERE EXISTS (<fence>): the same one
        # row or none, but SQLite runs it with RETURNING for about 10 us less a write.
        source = _values_from(runs, rows, where=_fence())
        run = runs.c.id == bindparam("fence_run")
        flag = select(runs.c.cancel_requested).where(run)
        inbox = select(runs.c.undelivered_messages).where(run)
        return (
            insert(entries)
            .from_select(ENTRY_COLUMNS, source)
            .returning(entries.c.seq, flag.scalar_subquery(), inbox.scalar_subquery())
        )

    def fenced_insert_quiet(self, rows: int = 1) -> Insert:
        # SQLite builds a RETURNING's rows in a table of their own before it hands them
        # over: a write with none costs about 6 us of CPU less (docs/performance/step.md). The
        # conditions are literals, not binds: the values are fenced_insert's, in its order.
        heard_nothing = (runs.c.cancel_requested == false()) & (
            runs.c.undelivered_messages == literal_column("0")
        )
        source = _values_from(runs, rows, where=_fence() & heard_nothing)
        return insert(entries).from_select(ENTRY_COLUMNS, source)

    write_begins_with = "BEGIN IMMEDIATE"

    def begin_write(
        self, execute: Callable[[str], None], dbapi_connection: Any, one_statement: bool
    ) -> bool:
        # As the engine's `begin` hook does, without its trip through Connection.execute.
        execute(self.write_begins_with)
        return False

    def is_corrupt(self, exc: BaseException) -> bool:
        # SQLITE_NOTADB: not a database file at all; SQLITE_CORRUPT (and its extended
        # codes): "database disk image is malformed".
        name = str(getattr(getattr(exc, "orig", None) or exc, "sqlite_errorname", ""))
        return name == "SQLITE_NOTADB" or name.startswith("SQLITE_CORRUPT")

    def read_options(self) -> dict[str, Any]:
        # A plain (DEFERRED) BEGIN: a reader never takes the write lock that every
        # BEGIN IMMEDIATE of the journal and the claims wait on.
        return {DEFERRED: True}

    def snapshot_options(self) -> dict[str, Any]:
        return {DEFERRED: True}  # a read transaction in WAL mode is one snapshot

    # clock: every process using a SQLite file runs on this machine, on its clock.
    # wake_workers, listen: SQLite has no notifications; its workers poll.


# libpq's settings for a network that breaks (a URL's own query wins): give up a connect
# after 10 s, notice a silent peer by keepalives within about 30 s of quiet, and drop a
# connection whose sent data goes unacknowledged for 15 s, so that a worker cut off from
# its database errs and retries (jittered) instead of hanging on a dead socket.
_NETWORK_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 15,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}


def _column_types(table: Table = entries) -> dict[str, str]:
    """Each column's type, without a length: a value too long is refused by the
    INSERT (as fenced_insert's is), never cut by a cast."""
    from sqlalchemy.dialects.postgresql.base import PGDialect

    dialect = PGDialect()  # type: ignore[no-untyped-call]
    return {
        column.name: re.sub(r"\(\d+\)", "", column.type.compile(dialect=dialect))
        for column in table.columns
    }


def _batch_columns() -> tuple[str, str, str]:
    """An entries batch's SQL pieces: the columns, the record its JSON is read as (a JSON
    column as its text), and the values inserted (that text cast: kept byte for byte as a
    row's own write keeps it; JSON, not JSONB: schema.Json)."""
    types = _column_types()
    json = {name for name, kind in types.items() if kind == "JSON"}
    columns = ", ".join(ENTRY_COLUMNS)
    record = ", ".join(f"{n} {'TEXT' if n in json else types[n]}" for n in ENTRY_COLUMNS)
    inserted = ", ".join(f"{n}::json" if n in json else n for n in ENTRY_COLUMNS)
    return columns, record, inserted


@functools.cache
def _insert_entries_sql() -> str:
    # Built at the first batch claim, not at import: it imports PostgreSQL's dialect.
    columns, record, inserted = _batch_columns()
    return f"""\
INSERT INTO entries ({columns})
SELECT {inserted} FROM json_to_recordset(%(batch)s::json) AS b({record})"""


@functools.cache
def _fenced_insert_runs_sql(ends: tuple[str, ...] = ()) -> str:
    # fenced_insert's statement, for the rows of several runs: each run's row is locked and
    # its lease renewed (once a third of it is spent) only while its epoch is the one its
    # rows carry, and only the rows of runs so fenced go in. The runs' rows are locked in id
    # order (`locked`: sorted, then FOR UPDATE) so that this statement and another that
    # locks several runs' rows at once take them in one order, and cannot deadlock.
    # Built at the first group commit, not at import: it imports PostgreSQL's dialect,
    # which a SQLite process has no use for.
    # A JSON column is read from the batch as its text, and cast in the INSERT: kept byte
    # for byte as a row's own write keeps it (JSON, not JSONB: schema.Json).
    # With `ends` (runs' columns), the runs whose last write is in the batch end in the same
    # statement: a second JSON parameter, `ends`, holds for each such run its run_id and its
    # `ends` columns' values; its row takes them and lets its lease go, in the UPDATE that
    # fences it (fenced_insert_finishing's, for several runs). Other runs' rows keep theirs.
    columns, record, inserted = _batch_columns()
    renewed = """CASE
        WHEN runs.lease_expires_at IS NULL OR runs.lease_expires_at < fences.fence_renew_after
        THEN fences.fence_expiry ELSE runs.lease_expires_at END"""
    ending = sources = ""
    if ends:
        kinds = _column_types(runs)
        typed = ", ".join(f"{n} {'TEXT' if kinds[n] == 'JSON' else kinds[n]}" for n in ends)
        ending = f"""
), ends AS (
    SELECT * FROM json_to_recordset(%(ends)s::json) AS e(run_id {kinds["id"]}, {typed})"""
        sets = "".join(
            f",\n        {n} = CASE WHEN ends.run_id IS NULL THEN runs.{n} "
            f"ELSE ends.{n}{'::json' if kinds[n] == 'JSON' else ''} END"
            for n in ends
        )
        renewed = f"CASE WHEN ends.run_id IS NULL THEN {renewed} END"
        renewed += f""",
        lease_owner = CASE WHEN ends.run_id IS NULL THEN runs.lease_owner END{sets}"""
        sources = " LEFT JOIN ends ON ends.run_id = fences.run_id"
    return f"""\
WITH batch AS (
    SELECT * FROM json_to_recordset(%(batch)s::json)
        AS b({record}, fence_expiry timestamptz, fence_renew_after timestamptz){ending}
), locked AS (
    SELECT id FROM runs WHERE id IN (SELECT run_id FROM batch) ORDER BY id FOR UPDATE
), fences AS (
    SELECT run_id, lease_epoch, max(fence_expiry) AS fence_expiry,
        max(fence_renew_after) AS fence_renew_after
    FROM batch GROUP BY run_id, lease_epoch
), fenced AS (
    UPDATE runs SET lease_expires_at = {renewed}
    FROM fences{sources}
    WHERE runs.id = fences.run_id AND runs.lease_epoch = fences.lease_epoch
        AND runs.id IN (SELECT id FROM locked)
    RETURNING runs.id, runs.cancel_requested, runs.undelivered_messages
)
INSERT INTO entries ({columns})
SELECT {inserted} FROM batch WHERE run_id IN (SELECT id FROM fenced)
RETURNING run_id, seq,
    (SELECT cancel_requested FROM fenced WHERE fenced.id = entries.run_id),
    (SELECT undelivered_messages FROM fenced WHERE fenced.id = entries.run_id)"""


def _inserted_from(fenced_update: Update, rows: int) -> Insert:
    """PostgreSQL's fenced insert: `fenced_update` of the run's row (while its epoch is this
    worker's) in a CTE, and the entries inserted from the row it returns, with the run's
    cancel flag and messages."""
    fenced = (
        fenced_update.where(_fence())
        .returning(runs.c.cancel_requested, runs.c.undelivered_messages)
        .cte("fenced")
    )
    source = _values_from(fenced, rows)
    return (
        insert(entries)
        .from_select(ENTRY_COLUMNS, source)
        .add_cte(fenced)
        .returning(
            entries.c.seq,
            select(fenced.c.cancel_requested).scalar_subquery(),
            select(fenced.c.undelivered_messages).scalar_subquery(),
        )
    )


class PostgresBackend(Backend):
    """PostgreSQL through psycopg 3: the coordination engine for workers on many machines."""

    name = "postgresql"
    locks_trees = True
    row_lock = " FOR UPDATE"
    writes_in_ctes = True
    caps_connections = True
    writes_renew_lease = True
    partitions_journal = True
    writes_runs_together = True
    settles_in_insert = True
    reserves_in_insert = True
    sums_by_second = True
    finishes_in_insert = True
    claims_pass_held = True
    title = "PostgreSQL"
    notifies = True

    def create_engine(
        self,
        url: URL,
        kwargs: dict[str, Any],
        *,
        idle_transactions: float | None = None,
        direct: URL | None = None,
    ) -> Engine:
        # What a URL does not say about a broken network, runner does: without these, a
        # worker cut off from its database waits minutes on a connect (the kernel's SYN
        # retries) or on a write whose packets go unanswered (its retransmissions, ~15
        # min), long after its lease ended, and comes back only when the kernel gives up.
        network = {k: v for k, v in _NETWORK_DEFAULTS.items() if k not in url.query}
        connect_args = {**network, **kwargs.pop("connect_args", {})}
        if direct is not None:
            # Behind a pooler in transaction mode each transaction may run on another
            # server session: a statement psycopg prepared on one (its fifth run of a
            # text, by default) is unknown to the next, so none is prepared; and PgBouncer
            # refuses a startup packet's `options` (its idle_transaction_timeout does what
            # idle_in_transaction_session_timeout does here).
            connect_args["prepare_threshold"] = None
        elif idle_transactions is not None and "options" not in url.query:
            # A writer cut off in the middle of a transaction leaves its server session
            # idle in it, holding the run rows it locked: no other worker could take those
            # runs over until the network healed. runner's own transactions are never idle
            # for more than milliseconds; sent in the startup packet, it costs nothing.
            milliseconds = max(1000, int(idle_transactions * 1000))
            connect_args["options"] = f"-c idle_in_transaction_session_timeout={milliseconds}"
        engine = create_engine(url, connect_args=connect_args, **kwargs)
        for_postgresql()  # its dialect is loaded now: the options cost no import
        _ping_after_idle(engine)
        event.listen(engine, "checkin", _out_of_autocommit)
        if direct is not None:
            _DIRECT[engine] = direct
        return engine

    def read_only_engine(self, url: URL, direct: URL | None = None) -> Engine:
        engine = self.create_engine(url, {}, direct=direct)

        @event.listens_for(engine, "connect")
        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Every transaction psycopg begins is READ ONLY (BEGIN READ ONLY): the server
            # refuses any write, whichever pooled session the transaction runs on.
            dbapi_connection.read_only = True
            if direct is not None:
                return  # a session's settings would outlive it, on another client's turn
            # And every transaction of the session, should anything begin one otherwise.
            autocommit = dbapi_connection.autocommit
            dbapi_connection.autocommit = True
            dbapi_connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            dbapi_connection.autocommit = autocommit

        return engine

    def fenced_insert(self, rows: int = 1) -> Insert:
        # Renew the lease and lock the run row in the same statement: a claimer's UPDATE
        # waits for this commit, and this INSERT inserts nothing once the epoch moved.
        # The lease is renewed once a third of it is spent (the heartbeat's pace), else set
        # to itself: an UPDATE that changes no indexed column is HOT, so a long run does not
        # add index entries (about 1 KB a step) to the runs table with every write.
        expiry = runs.c.lease_expires_at
        due = expiry.is_(None) | (expiry < bindparam("fence_renew_after", type_=expiry.type))
        renewed = case((due, bindparam("fence_expiry", type_=expiry.type)), else_=expiry)
        return _inserted_from(update(runs).values(lease_expires_at=renewed), rows)

    def fenced_insert_finishing(self, rows: int, finished: dict[str, Any]) -> Insert:
        # A run's last write in one statement, its own transaction in autocommit: one round
        # trip, where the entry's INSERT and the run's UPDATE were four with BEGIN and COMMIT.
        ended = {**finished, "lease_owner": null(), "lease_expires_at": null()}
        return _inserted_from(update(runs).values(ended), rows)

    def fenced_insert_runs(self, ends: tuple[str, ...] = ()) -> str:
        return _fenced_insert_runs_sql(ends)

    def insert_entries(self) -> str:
        return _insert_entries_sql()

    def json_text(self, dbapi_connection: Any) -> Callable[[Any], str | None]:
        from psycopg.adapt import PyFormat

        dumpers: dict[type, Any] = {}

        def text(value: Any) -> str | None:
            if value is None:
                return None
            kind = type(value)
            dumper = dumpers.get(kind)
            if dumper is None:  # psycopg's Json wrapper, with the dumps it was given
                dumper = dbapi_connection.adapters.get_dumper(kind, PyFormat.TEXT)
                dumper = dumpers[kind] = dumper(kind, dbapi_connection)
            return bytes(dumper.dump(value)).decode()

        return text

    def begin_write(
        self, execute: Callable[[str], None], dbapi_connection: Any, one_statement: bool
    ) -> bool:
        # psycopg begins a transaction with a BEGIN of its own, a round trip, and COMMIT is
        # another: one statement (a fenced insert is one CTE) needs neither in autocommit,
        # where it is its own transaction, committed (and durable) when it returns. Only
        # between transactions: a write inside an open one joins it, as before.
        if dbapi_connection.info.transaction_status != _IDLE:
            return False
        if dbapi_connection.autocommit:
            # A journal writer's connection stays in autocommit from one write to the next
            # (runner.sql.writer: psycopg's switch costs a lock and a generator, about 3 us
            # each way): several statements need a transaction begun for them, which the
            # write's COMMIT (or ROLLBACK) ends.
            if not one_statement:
                execute("BEGIN")
            return False
        if not one_statement:
            return False
        dbapi_connection.autocommit = True
        return True

    def end_write(self, dbapi_connection: Any) -> None:
        if not dbapi_connection.closed:  # a lost connection is discarded anyway
            dbapi_connection.autocommit = False

    def left_to_commit(self, dbapi_connection: Any) -> bool:
        # psycopg's commit of nothing still takes its lock and runs a generator, twice a step.
        return not dbapi_connection.autocommit or (
            dbapi_connection.info.transaction_status != _IDLE
        )

    def snapshot_options(self) -> dict[str, Any]:
        return {"isolation_level": "REPEATABLE READ"}

    def is_corrupt(self, exc: BaseException) -> bool:
        # data_corrupted, index_corrupted: the server found damaged pages.
        sqlstate = getattr(getattr(exc, "orig", None) or exc, "sqlstate", None)
        return sqlstate in ("XX001", "XX002")

    def lock_migrations(self, connection: Connection) -> None:
        # Two upgrades of a fresh database at once both CREATE TABLE alembic_version, and
        # the loser failed on a duplicate key in pg_type. Advisory locks belong to one
        # database, so upgrades of different databases (on one server) still run at once.
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")

    def clock(self, engine: Engine, base: Clock = SYSTEM) -> Clock:
        clock = DatabaseClock(engine, base)
        clock.time()  # measured now, while the caller is connecting anyway
        return clock

    def wake_workers(self, connection: Connection) -> None:
        # NOTIFY inside the transaction: PostgreSQL delivers it at commit, and not at all on
        # a rollback, so a listener never hears of a run it cannot see yet.
        connection.exec_driver_sql(f"NOTIFY {WAKE_CHANNEL}")

    def listen(self, engine: Engine, channel: str = WAKE_CHANNEL) -> Listening:
        import psycopg

        # The engine's own connect arguments, on a connection outside its pool: a LISTEN
        # lasts as long as the session, so it must not go back to the pool to be reused.
        # Behind a pooler, on the server itself: the pooler would hand the session that
        # LISTENs to other clients and this connection would hear nothing.
        args, kwargs = engine.dialect.create_connect_args(_DIRECT.get(engine, engine.url))
        connection = psycopg.connect(*args, **{**kwargs, "autocommit": True})
        try:
            connection.execute(f"LISTEN {channel}")
        except BaseException:
            connection.close()
            raise
        return _PostgresListening(connection)

    def refresh_statistics(self, connection: Connection) -> None:
        # Thousands of runs just inserted into a table the planner last saw (nearly) empty:
        # it then estimates one queued run, and sorts them all on every claim instead of
        # reading the claim index in order (6 ms against 0.1 ms with 2,000 queued), until
        # autovacuum's ANALYZE comes round. A role that does not own `runs` gets a warning.
        connection.exec_driver_sql("ANALYZE runs")

    def replica_lag(self, connection: Connection) -> float | None:
        # A standby that has replayed everything it received is current, however long ago
        # the primary last committed (the replay timestamp alone would say it lags then).
        standby, lag = connection.exec_driver_sql(_REPLICA_LAG).one()
        return float(lag) if standby else None


def pooled(engine: Engine) -> bool:
    """Whether `engine` reaches PostgreSQL through a pooler in transaction mode (it was
    opened with a direct URL beside it): no session state may be set on its connections."""
    return engine in _DIRECT


# Engines whose URL is a pooler, and the server itself beside each (for LISTEN).
_DIRECT: WeakKeyDictionary[Engine, URL] = WeakKeyDictionary()


_REPLICA_LAG = """
SELECT pg_is_in_recovery(),
       CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE COALESCE(
              EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0)
       END
"""


class _PostgresListening:
    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def wait(self, timeout: float) -> list[str]:
        heard = [n.payload for n in self.connection.notifies(timeout=timeout, stop_after=1)]
        if heard:  # and those already arrived with it, without waiting again
            heard += [n.payload for n in self.connection.notifies(timeout=0)]
        return heard

    def close(self) -> None:
        self.connection.close()


def _ping_after_idle(engine: Engine) -> None:
    """Ping a pooled connection before use only if it sat idle for a while.

    A run checks a connection out for each journal write, a few milliseconds after the last
    one came back: pinging each (SQLAlchemy's pool_pre_ping) would add a round trip to every
    write. A connection idle for longer, which a server restart or an idle timeout may have
    closed, is pinged and replaced if dead; one that broke in the last second fails its
    statement, and the journal's write tries again on a new connection.
    """

    @event.listens_for(engine, "checkin")
    def idle_from(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards this connection and checks out another (a new one).
            raise DisconnectionError(f"a pooled connection was dead: {exc}") from exc


_BACKENDS: dict[str, Backend] = {"sqlite": SqliteBackend(), "postgresql": PostgresBackend()}


def backend_for(dialect: str) -> Backend:
    """The backend of a dialect name (`engine.dialect.name`, `url.get_backend_name()`)."""
    try:
        return _BACKENDS[dialect]
    except KeyError:
        raise DatabaseRefused(
            f"runner stores runs in SQLite or PostgreSQL, not {dialect}"
        ) from None


def _out_of_autocommit(dbapi_connection: Any, _record: Any) -> None:
    """A connection back in the pool leaves autocommit (reset has ended any transaction).

    A journal writer keeps its connections in autocommit between its writes
    (runner.sql.writer); given back, by its close or collected with a runner dropped
    unclosed, none may hand autocommit to its next user, whose every transaction would be
    one statement long."""
    if dbapi_connection is None or dbapi_connection.closed or not dbapi_connection.autocommit:
        return
    with contextlib.suppress(Exception):  # a broken connection: its next use finds out
        dbapi_connection.autocommit = False


def _adapt_none_at_once() -> None:
    """Give sqlite3 an adapter for None, which binds NULL as before.

    sqlite3 binds an int, a float, a str or a bytearray as it is; any other value it first
    offers to its adapters, and with none registered for its type, asks the value's class
    for `__adapt__`, an AttributeError it formats and drops: about 0.2 us a value. A journal
    row binds ten None or so (no error, no key, no wait...), twice a step. Found in the
    registry, None goes straight through: `{}.get(None)` is None, at C's cost. An adapter
    registered by the program itself for None stays as it is.
    """
    if (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(type(None), _NONE_STAYS_NONE)


_NO_VALUES: dict[None, None] = {}
_NONE_STAYS_NONE: Callable[[None], None] = _NO_VALUES.get


def _enable_wal(dbapi_connection: Any) -> None:
    """Switch the file to WAL, waiting out other connections doing the same.

    On a brand-new file several connections may race to leave rollback mode; SQLite
    answers the losers "database is locked" at once, without its busy handler (waiting
    could deadlock), so the wait happens here, bounded like the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            (mode,) = dbapi_connection.execute("PRAGMA journal_mode").fetchone()
            if mode != "wal":
                dbapi_connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(WAL_SWITCH_RETRY_SECONDS)


class DatabaseClock:
    """The database server's clock, read through this machine's monotonic clock.

    Leases are compared across machines, so they must be measured on one clock: the
    server's. Asking it on every write would cost a round trip, so the server's time is
    measured once and again every `refresh` seconds, and carried forward in between by this
    machine's monotonic clock, which no step of the wall clock moves: a machine whose clock
    is a minute ahead still writes the server's time, and so does one whose clock jumps 35 s
    forward (NTP, a VM resumed) between two measures. Its leases and claims cannot take a
    live holder's run. A failed refresh keeps the last measure (the database is away for a
    moment; the writes that follow will say so).
    """

    def __init__(
        self,
        engine: Engine,
        base: Clock = SYSTEM,
        *,
        refresh: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.base = base
        self.refresh = refresh
        self.monotonic = monotonic
        self._offset: float | None = None  # server time minus monotonic time
        self._wall_offset: float | None = None  # server time minus the base clock's
        self._measured_at = 0.0  # monotonic
        self._lock = threading.Lock()

    def time(self) -> float:
        now = self.monotonic()
        if self._offset is None or now - self._measured_at > self.refresh:
            self._measure(now)
        assert self._offset is not None
        return self.monotonic() + self._offset

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)

    @property
    def offset(self) -> float | None:
        """Seconds the server's clock was ahead of this machine's at the last measure (None
        until measured)."""
        return self._wall_offset

    def _measure(self, now: float) -> None:
        # Once there is an offset, one thread measures and the others go on with the last
        # one: a thread may ask the time while it holds a pooled connection, and threads
        # queued here holding theirs could leave a small pool none to measure with.
        if not self._lock.acquire(blocking=self._offset is None):
            return
        try:
            if self._offset is not None and now - self._measured_at <= self.refresh:
                return  # another thread measured meanwhile
            try:
                with self.engine.connect() as connection, plain(connection) as reader:
                    before = self.monotonic()
                    wall = self.base.time()
                    server = database_now(reader)
                    after = self.monotonic()
            except SQLAlchemyError:
                if self._offset is None:
                    raise
                return
            middle = (before + after) / 2
            self._wall_offset = server.timestamp() - wall
            self._offset = server.timestamp() - middle
            self._measured_at = after
        finally:
            self._lock.release()
