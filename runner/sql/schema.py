"""The schema, declared once: Alembic's target metadata and the store's tables.

The schema is a public interface (users query it with plain SQL), so columns are named
plainly and every status value is explained here and in docs/reference/schema.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect

from runner.defaults import DEFAULT_QUEUE as DEFAULT_QUEUE
from runner.sql.reads import SCHEMA_REVISION as SCHEMA_REVISION

metadata = MetaData()

# The Alembic revision these tables are (declared in runner.reads, which checks it without
# SQLAlchemy) and the queue of a run submitted without one: re-exported from here.

# Plain JSON, not JSONB, on PostgreSQL: it keeps the text exactly as written, so arguments
# come back as the tool first got them (JSONB rewrites 1.5e17 as an integer and refuses
# a NUL). none_as_null: a Python None is SQL NULL, not the JSON value `null`.
Json = JSON(none_as_null=True)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp with time zone, always given back aware and in UTC.

    SQLite keeps no zone (it hands back naive values, written in UTC); PostgreSQL's
    timestamptz comes back in the session's zone. Both become UTC here, once.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"a naive datetime cannot be stored as UTC: {value!r}")
        return value.astimezone(UTC)

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        # On SQLite every journal row binds one: SQLAlchemy's text for it (its zone dropped,
        # `%` over a dict of seven fields, behind two calls) costs about 1.3 us, isoformat
        # about a third of that. Taken only where it writes the very same text.
        general = super().bind_processor(dialect)
        if dialect.name != "sqlite" or general is None:
            return general
        probes = (datetime(2001, 2, 3, 4, 5, 6, 7, UTC), datetime(987, 6, 5, 4, 3, 2, 0, UTC))
        if any(_sqlite_text(probe) != general(probe) for probe in probes):
            return general
        return _sqlite_text

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


def _sqlite_text(value: datetime | None) -> str | None:
    """`value` in UTC as SQLite's DATETIME stores it: `YYYY-MM-DD HH:MM:SS.ffffff`, no zone.

    The text up to the second is kept from the last value written (a process writes many a
    second): a lookup and the microseconds, half of isoformat's cost."""
    global _last_second
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"a naive datetime cannot be stored as UTC: {value!r}")
    value = value.astimezone(UTC)
    second = (value.year, value.month, value.day, value.hour, value.minute, value.second)
    last = _last_second  # one read: another thread may replace it meanwhile
    if last[0] != second:
        last = _last_second = (second, value.isoformat(" ", "seconds")[:19])
    return f"{last[1]}.{value.microsecond:06d}"


# The last second `_sqlite_text` wrote, and its text: replaced whole, never changed.
_last_second: tuple[tuple[int, ...], str] = ((), "")


Timestamp = UtcDateTime()

# Steps and tokens: 64-bit on both (SQLite's INTEGER already is; revision 0003 widened them
# on PostgreSQL). The store saturates them at COUNTER_MAX, so no sum overflows a column.
Counter = BigInteger().with_variant(Integer(), "sqlite")


runs = Table(
    "runs",
    metadata,
    Column("id", String(32), primary_key=True, comment="short, time-sortable run id"),
    Column("agent", Text, nullable=True, comment="agent reference (module:attr, path.py:attr)"),
    Column("agent_name", String(200), nullable=True, comment="the Agent's name"),
    Column("release", String(200), nullable=True, comment="the Agent's release label"),
    Column("task", Text, nullable=False),
    Column("budgets", Json, nullable=False, comment="the run's budgets, as JSON"),
    Column("status", String(16), nullable=False, comment="queued, running, waiting or finished"),
    Column("stop_reason", String(32), nullable=True, comment="why a finished run stopped"),
    Column("output", Text, nullable=True, comment="the answer (JSON text if output_format=json)"),
    Column("output_format", String(8), nullable=True, comment="text or json"),
    Column("error", Text, nullable=True, comment="the model's error on model_error, etc."),
    Column("wrapped_up", Boolean, nullable=False, default=False),
    Column("steps", Counter, nullable=False, default=0, comment="steps taken (final value)"),
    Column("tokens", Counter, nullable=False, default=0, comment="tokens spent (final value)"),
    Column("cost", Float, nullable=False, default=0.0, comment="cost spent (final value)"),
    Column("resumes", Integer, nullable=False, default=0, comment="takeovers after a crash"),
    Column("stalled_resumes", Integer, nullable=False, default=0, comment="in a row, no progress"),
    Column("progress_seq", Integer, nullable=False, default=0, comment="entries at last claim"),
    Column("deadline", Timestamp, nullable=True, comment="wall-clock limit"),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("lease_owner", String(200), nullable=True, comment="host:pid:start of the worker"),
    Column("lease_epoch", Integer, nullable=False, default=0, comment="fencing token"),
    Column("lease_expires_at", Timestamp, nullable=True),
    Column("leased_at", Timestamp, nullable=True, comment="when the owner took it"),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("finished_at", Timestamp, nullable=True),
    # Revision 0005 (operating runs): when the holder was last heard from (its claim or
    # heartbeat: never the per-step write), and where a fork came from (named parent_run_id
    # and parent_step until revision 0010: a fork is a copy, not a child).
    Column("last_seen_at", Timestamp, nullable=True, comment="holder's last claim or heartbeat"),
    Column("forked_from_id", String(32), nullable=True, comment="the run this was forked from"),
    Column("forked_at_step", Integer, nullable=True, comment="steps copied from that run"),
    # A waiting run (migration 0006): since when, and when approval_timeout denies its call.
    Column("waiting_since", Timestamp, nullable=True, comment="when the run began to wait"),
    Column("wait_expires_at", Timestamp, nullable=True, comment="when its wait times out"),
    # Queues (revision 0008): last, as ALTER TABLE adds them. Server defaults, so rows
    # written before the revision (and INSERTs by hand) land in the default queue.
    Column(
        "queue",
        String(64),
        nullable=False,
        server_default=DEFAULT_QUEUE,
        comment="the queue a worker claims it from (--queue)",
    ),
    Column(
        "priority",
        Integer,
        nullable=False,
        server_default="0",
        comment="higher is claimed first within the queues a worker serves",
    ),
    Column("not_before", Timestamp, nullable=True, comment="a delayed run: no claim before this"),
    # Trees of runs (revision 0010): a sub-agent is a child run, started by a tool call of
    # its parent. No foreign keys, as for forks: pruning a run leaves the others' rows.
    # root_id is nullable only because ALTER TABLE adds it (a NOT NULL column would need a
    # rebuild of runs on SQLite, which cascades to the journal): every insert sets it.
    Column("parent_id", String(32), nullable=True, comment="the run whose call started this one"),
    Column("root_id", String(32), nullable=True, comment="the tree's root (a root: its own id)"),
    Column(
        "parent_call_key",
        String(80),
        nullable=True,
        comment="idempotency key of the parent's call that started this run",
    ),
    # Schedules (revision 0012): the schedule whose tick started the run; no foreign key,
    # so removing a schedule leaves its runs. Indexed for `runner list --schedule NAME`.
    Column("schedule", String(18), nullable=True, comment="the schedule that started the run"),
    Index("ix_runs_schedule_created_at", "schedule", "created_at"),
    # What the runs below this one (its sub-agents, theirs, ...) spent, charged to it as
    # they spend it, in the transaction of the entry that spent it (revision 0013): the
    # tree's spend is a root's own (steps, tokens, cost) plus these.
    Column(
        "below_steps",
        Counter,
        nullable=False,
        server_default="0",
        comment="steps the runs below this one spent, charged as spent",
    ),
    Column(
        "below_tokens",
        Counter,
        nullable=False,
        server_default="0",
        comment="tokens the runs below this one spent, charged as spent",
    ),
    Column(
        "below_cost",
        Float,
        nullable=False,
        server_default="0",
        comment="cost the runs below this one spent, charged as spent",
    ),
    # Messages (revision 0014): how many sent to the run are not in its journal yet. Every
    # journal write reads it back with the cancel flag: a worker hears of a message free.
    Column(
        "undelivered_messages",
        Integer,
        nullable=False,
        server_default="0",
        comment="messages sent to the run and not in its journal yet",
    ),
    # Releases (revision 0019): a run a check parked (a worker of another release found
    # that its code would not take the run's recorded steps again) is taken from then on
    # only by a worker of its own release.
    Column(
        "parked_reason",
        String(32),
        nullable=True,
        comment="why a check parked the run (check_failed): only its release's "
        "workers take it; NULL: not parked",
    ),
    Index("ix_runs_status_lease", "status", "lease_expires_at"),
    # Claims find the waits that timed out: waiting runs by expiry, never the whole table.
    Index("ix_runs_status_wait_expires_at", "status", "wait_expires_at"),
    Index("ix_runs_created_at", "created_at"),
    # For the history (migration 0002): `runner list --release/--stop-reason` read the newest
    # rows of one value, not the whole table, and `runner prune` takes each batch of old
    # finished runs without a sort. Few on purpose: on PostgreSQL every step's UPDATE of
    # the lease writes to each index of runs.
    Index("ix_runs_release_created_at", "release", "created_at"),
    Index("ix_runs_stop_reason_created_at", "stop_reason", "created_at"),
    Index("ix_runs_status_finished_at", "status", "finished_at"),
    # Trees (revision 0010): the children of a run, and every run of a tree, each in the
    # order they were created. A root's own row is in the second (root_id = id).
    Index("ix_runs_parent_id_created_at", "parent_id", "created_at"),
    Index("ix_runs_root_id_created_at", "root_id", "created_at"),
    comment="one row per run",
)

# Claims (revision 0008): the queued runs of the queue a worker serves (or of any queue),
# highest priority first, then oldest (the id breaks ties), read in index order and stopped
# at the first: the key is the claim's ORDER BY whole, or PostgreSQL sorts every queued run.
# With not_before (and queue) after it, a claim passes delayed runs by the index alone.
Index(
    "ix_runs_claim",
    runs.c.status,
    runs.c.queue,
    runs.c.priority.desc(),
    runs.c.created_at,
    runs.c.id,
    runs.c.not_before,
)
Index(
    "ix_runs_claim_any_queue",
    runs.c.status,
    runs.c.priority.desc(),
    runs.c.created_at,
    runs.c.id,
    runs.c.queue,
    runs.c.not_before,
)

entries = Table(
    "entries",
    metadata,
    Column("run_id", String(32), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False, comment="0, 1, 2, ..."),
    Column("step", Integer, nullable=False),
    Column("kind", String(16), nullable=False, comment="task/action/observation/final/wait/..."),
    Column("role", String(16), nullable=True, comment="user/assistant/tool; NULL if not shown"),
    Column("content", Text, nullable=True),
    Column("content_format", String(8), nullable=False, default="text", comment="text or json"),
    Column("action_type", String(8), nullable=True, comment="final, tool or invalid"),
    Column("tool", String(200), nullable=True),
    Column("args", Json, nullable=True),
    Column("is_error", Boolean, nullable=False, default=False),
    Column("error", Text, nullable=True, comment="why a model output was invalid"),
    Column("idempotency_key", String(80), nullable=True),
    Column("attempt", Integer, nullable=False, default=1),
    Column("usage_tokens", Counter, nullable=False, default=0, comment="this model call's"),
    Column("usage_cost", Float, nullable=False, default=0.0, comment="this model call's"),
    Column("steps", Counter, nullable=False, comment="the run's steps after this entry"),
    Column("tokens", Counter, nullable=False, comment="the run's tokens after this entry"),
    Column("cost", Float, nullable=False, comment="the run's cost after this entry"),
    Column("error_streak", Integer, nullable=False, comment="failed steps in a row"),
    Column("lease_epoch", Integer, nullable=False, comment="the lease that wrote this entry"),
    Column("created_at", Timestamp, nullable=False),
    # People in the loop (migration 0006).
    Column("waits_for", String(16), nullable=True, comment="on a wait: approval or reply"),
    Column("answer", String(16), nullable=True, comment="approved/denied/replied/timed_out"),
    Column("answered_by", String(200), nullable=True, comment="on an answer: who gave it"),
    # Revision 0007. Last, as ALTER TABLE adds it: `SELECT *` shows the same on every database.
    Column("call_id", String(200), nullable=True, comment="the provider's id of a tool call"),
    comment="the journal: one row per transcript entry, append-only",
)

queues = Table(
    "queues",
    metadata,
    Column("name", String(64), primary_key=True, comment="the queue's name, as runs.queue"),
    Column(
        "max_running",
        Integer,
        nullable=True,
        comment="most runs of the queue running at once, across all workers; NULL: no limit",
    ),
    Column("updated_at", Timestamp, nullable=False, comment="when the limit was last set"),
    # Retention (revision 0016), applied by workers (runner.sql.retention). The row named
    # `*` holds the default of every queue whose own row leaves a rule NULL.
    Column(
        "keep_seconds",
        BigInteger,
        nullable=True,
        comment="finished runs are deleted this long after they finished; NULL: kept",
    ),
    Column(
        "keep_runs",
        Integer,
        nullable=True,
        comment="only the newest this many finished runs are kept; NULL: all",
    ),
    # Releases (revision 0019): what a worker does with a run of another release.
    Column(
        "older_releases",
        String(16),
        nullable=True,
        comment="runs of another release than a worker's: continue, pin or check; NULL: continue",
    ),
    comment="limits of queues; a queue with no row here has no limit",
)
# Deltas (revision 0011): pieces of model responses still in flight, for followers. Not the
# journal, and nothing reads them to resume a run: a row lives until its call's action is
# journaled (the worker deletes it then), or until a worker takes the run up again, or at
# most DELTA_KEEP_SECONDS (runner.sql.deltas) when a crash left it behind.
deltas = Table(
    "deltas",
    metadata,
    Column(
        "id",
        Counter,
        primary_key=True,
        autoincrement=True,
        comment="a follower's cursor: grows with each delta written, never reused",
    ),
    Column("run_id", String(32), nullable=False, comment="the run whose model call streams"),
    Column("step", Integer, nullable=False, comment="the step whose model call it is"),
    Column(
        "ordinal",
        Integer,
        nullable=False,
        comment=("its place in the call's response, from 0 (0 begins the step's response afresh)"),
    ),
    Column(
        "part",
        String(16),
        nullable=False,
        comment="text: the model's text; arguments: a piece of a tool call's arguments (JSON)",
    ),
    Column(
        "call_index",
        Integer,
        nullable=False,
        comment="for arguments: which tool call of the response, from 0",
    ),
    Column("tool", Text, nullable=True, comment="for arguments: the tool's name, once known"),
    Column("text", Text, nullable=False, comment="the piece, as the provider sent it"),
    Column("created_at", Timestamp, nullable=False, comment="when the worker wrote it"),
    Index("ix_deltas_run_id_id", "run_id", "id"),
    Index("ix_deltas_created_at", "created_at"),
    sqlite_autoincrement=True,
    comment="pieces of model responses in flight (ephemeral: deleted once journaled)",
)

follows = Table(
    "follows",
    metadata,
    Column("run_id", String(32), primary_key=True, comment="the run a process follows"),
    Column(
        "followed_until",
        Timestamp,
        nullable=False,
        comment="until when its writes NOTIFY (PostgreSQL); the follower renews it well before",
    ),
    comment="runs followed live: their journal and delta writes NOTIFY runner_follow",
)

schedules = Table(
    "schedules",
    metadata,
    Column("name", String(18), primary_key=True, comment="the schedule's name"),
    Column("agent", Text, nullable=False, comment="agent reference of its runs"),
    Column("agent_name", String(200), nullable=True),
    Column("release", String(200), nullable=True),
    Column("task", Text, nullable=False, comment="the task of each run"),
    Column("budgets", Json, nullable=False),
    Column("queue", String(64), nullable=False, comment="queue of its runs"),
    Column("priority", Integer, nullable=False, comment="priority of its runs"),
    Column("cron", String(200), nullable=False, comment="5-field cron"),
    Column("timezone", String(64), nullable=False, comment="IANA zone"),
    Column("catch_up", String(8), nullable=False, comment="last or skip"),
    Column("overlap", String(8), nullable=False, comment="skip or allow"),
    Column("paused", Boolean, nullable=False, comment="true: no tick fires"),
    Column("next_tick_at", Timestamp, nullable=False, comment="the first tick not yet handled"),
    Column(
        "last_tick_at", Timestamp, nullable=True, comment="the last tick handled (fired or skipped)"
    ),
    Column("last_run_id", String(32), nullable=True, comment="the last tick's run"),
    Column("last_skip", String(16), nullable=True, comment="why the last tick skipped"),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    # What a worker reads at each look: the schedules due, not paused.
    Index("ix_schedules_due", "paused", "next_tick_at"),
    comment="runs started on a cron schedule, one per tick",
)

messages = Table(
    "messages",
    metadata,
    Column("run_id", String(32), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column(
        "number",
        Integer,
        primary_key=True,
        autoincrement=False,
        comment="1, 2, 3, ...: the order of sending",
    ),
    Column(
        "idempotency_key",
        String(80),
        nullable=False,
        comment="the sender's key: the same key twice is one message",
    ),
    Column("body", Text, nullable=False, comment="what the model is shown"),
    Column("sent_at", Timestamp, nullable=False),
    Column(
        "delivered_seq",
        Integer,
        nullable=True,
        comment="the seq of its entry in the run's journal; NULL: not delivered yet",
    ),
    UniqueConstraint("run_id", "idempotency_key", name="uq_messages_run_id_key"),
    comment="messages sent to runs, each journaled once as a user turn",
)
# The entries table's columns in order: how a journal row's values are laid out.

# Provider limits shared by the fleet (revision 0010). A limit is a row of `limits`; every
# model call of a run that draws from it holds a row of `limit_reservations` (its estimate
# while the call is in flight, then the tokens the provider reported); a run that found no
# room is in `limit_waiters` until it gets some (its place in line: oldest first).
limits = Table(
    "limits",
    metadata,
    Column("name", String(200), primary_key=True, comment="e.g. openai/gpt-4.1"),
    Column("tokens_per_minute", Counter, nullable=True, comment="NULL: no token limit"),
    Column("requests_per_minute", Integer, nullable=True, comment="NULL: no request limit"),
    Column("concurrency", Integer, nullable=True, comment="calls in flight at once; NULL: any"),
    Column(
        "backoff_until",
        Timestamp,
        nullable=True,
        comment="a provider's Retry-After, shared: no call reserves before this",
    ),
    Column("updated_at", Timestamp, nullable=False, comment="when the limit was last set"),
    # Revision 0025: a reservation made in a journal write's one statement reads the minute
    # before it locks this row, and reserves only if nobody reserved in between
    # (runner.sql.limit_rides).
    Column(
        "changes",
        Counter,
        nullable=False,
        server_default="0",
        comment="bumped by every reservation, grant and park under the row's lock (PostgreSQL)",
    ),
    comment="limits of model deployments, shared by every worker",
)

limit_reservations = Table(
    "limit_reservations",
    metadata,
    Column("id", String(32), primary_key=True, comment="random"),
    Column(
        "limit_name",
        String(200),
        ForeignKey("limits.name", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("run_id", String(32), nullable=False, comment="the run whose model call it is"),
    Column("lease_epoch", Integer, nullable=False, comment="the lease that reserved it"),
    Column("tokens", Counter, nullable=False, comment="estimate until settled, then usage"),
    Column("settled", Boolean, nullable=False, comment="the call ended: tokens are its usage"),
    Column("reserved_at", Timestamp, nullable=False, comment="when the call was reserved"),
    Column("settled_at", Timestamp, nullable=True),
    Column(
        "counted_from",
        Timestamp,
        nullable=False,
        comment="its minute starts here: reserved_at plus 10 s until settled, then settled_at",
    ),
    # The minute's reads are ranges of this (revision 0023): a call counts from its settle,
    # however long ago it was reserved. With the tokens (revision 0024), SQLite sums the
    # minute from the index alone, never the table's rows (a busy limit holds thousands).
    Index(
        "ix_limit_reservations_limit_counted_from_tokens", "limit_name", "counted_from", "tokens"
    ),
    comment="model calls charged to a limit in the last minute (older rows are deleted)",
)
# The calls in flight, counted against a limit's concurrency (revision 0024): only the rows
# not settled, a handful, where the minute's range holds every call of a busy limit. The
# statements that count them filter on this predicate as written (runner.sql.limits), so
# that both planners choose it. Its PostgreSQL predicate is added by for_postgresql(), not
# here: SQLAlchemy checks a `postgresql_` option by importing its PostgreSQL dialect (30 to
# 60 ms), which a process that opens only SQLite would then pay at start-up.
_UNSETTLED = limit_reservations.c.settled == false()
_unsettled_index = Index(
    "ix_limit_reservations_limit_unsettled",
    limit_reservations.c.limit_name,
    sqlite_where=_UNSETTLED,
)


# PostgreSQL: the settled calls of a limit summed by the second their minutes start (their
# settle's), kept by triggers on `limit_reservations` (revision 0026), so that a busy limit's
# minute is about 60 of these rows and one second of calls, not every call of the minute
# (3,500 a minute read 0.4 to 0.6 ms). SQLite sums the minute from its covering index and
# leaves this table empty.
limit_seconds = Table(
    "limit_seconds",
    metadata,
    # No foreign key: its check would take a share lock of the limit's row from inside a
    # settle, which a settle under a concurrency holds FOR UPDATE while it inserts the same
    # second (a deadlock). `runner limit remove` deletes a limit's rows here itself.
    Column("limit_name", String(200), primary_key=True),
    Column(
        "second",
        Timestamp,
        primary_key=True,
        comment="the whole second (UTC) the calls' counted_from falls in",
    ),
    Column("tokens", Counter, nullable=False, comment="their usage summed"),
    Column("calls", Counter, nullable=False, comment="how many calls"),
    comment="settled calls charged to a limit by the second (PostgreSQL; older rows deleted)",
)


def for_postgresql() -> None:
    """The schema's PostgreSQL options, added before PostgreSQL uses it (every PostgreSQL
    engine runner opens calls this): the same DDL as if declared above. Idempotent. Call it
    first to compile the schema for PostgreSQL without a runner engine (`create_all` on an
    engine of one's own), or the index comes out whole."""
    _unsettled_index.dialect_kwargs["postgresql_where"] = _UNSETTLED


limit_waiters = Table(
    "limit_waiters",
    metadata,
    Column(
        "limit_name",
        String(200),
        ForeignKey("limits.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("run_id", String(32), primary_key=True),
    Column("tokens", Counter, nullable=False, comment="the estimate it waits to reserve"),
    Column("waiting_since", Timestamp, nullable=False, comment="its place in line"),
    Index("ix_limit_waiters_limit_since", "limit_name", "waiting_since"),
    comment="runs parked until a limit has room for their next model call",
)

# A tree's budget held before its model calls (revision 0018): every model call of a child
# run holds a row here from before the call until the entry that records the call's output
# is written (which charges its real usage up the tree in the same transaction), so that no
# call starts once the tree's spend and its calls in flight reach an ancestor's budget.
tree_reservations = Table(
    "tree_reservations",
    metadata,
    Column("id", String(32), primary_key=True, comment="random"),
    Column("root_id", String(32), nullable=False, comment="the tree's root"),
    Column("run_id", String(32), nullable=False, comment="the run whose model call it is"),
    Column("lease_epoch", Integer, nullable=False, comment="the lease that reserved it"),
    Column("step", Integer, nullable=False, comment="the step whose model call it is"),
    Column("above", Json, nullable=False, comment="the ids of the runs above, nearest first"),
    Column("tokens", Counter, nullable=False, comment="the call's estimate"),
    Column("reserved_at", Timestamp, nullable=False),
    Index("ix_tree_reservations_root_id", "root_id"),
    Index("ix_tree_reservations_reserved_at", "reserved_at"),
    comment="model calls of child runs in flight, held against their ancestors' budgets",
)

scores = Table(
    "scores",
    metadata,
    Column("run_id", String(32), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(80), primary_key=True, comment="what is scored: one score per name"),
    Column(
        "status",
        String(16),
        nullable=False,
        comment="pending (its scorer has not started), scoring (a worker runs it), scored "
        "(value is kept) or failed (note says why)",
    ),
    Column("value", Float, nullable=True, comment="the score; NULL until scored"),
    Column("note", Text, nullable=True, comment="why: a judge's reasoning, or why it failed"),
    Column(
        "source",
        String(16),
        nullable=False,
        comment="scorer (a scorer declared on the agent) or manual (runner score, the API)",
    ),
    Column("attempts", Integer, nullable=False, default=0, comment="times its scorer started"),
    Column("lease_owner", String(200), nullable=True, comment="the worker running its scorer"),
    Column("lease_epoch", Integer, nullable=False, default=0, comment="fencing token"),
    Column("lease_expires_at", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("started_at", Timestamp, nullable=True, comment="when its scorer last started"),
    Column("scored_at", Timestamp, nullable=True, comment="when it was scored or failed"),
    Index("ix_scores_status", "status"),
    comment="scores of runs: by their agent's scorers after they end, or given by a person",
)
