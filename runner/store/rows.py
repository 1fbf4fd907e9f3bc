"""Runs and journal entries as stored, built from plain mappings of column values.

No SQLAlchemy here: a command that only reads (`runner list`) builds its rows from a DB-API
cursor through `runner.sql.reads`, the library from SQLAlchemy's rows, and both through these
constructors. The mapping holds decoded values (aware UTC datetimes, JSON as Python
values): SQLAlchemy's column types decode them on its path, `runner.sql.reads` on the other.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from runner.core.actions import ActionKind
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.defaults import DEFAULT_QUEUE
from runner.store.owner import is_dead
from runner.store.payloads import PLAIN, Payloads, is_envelope, open_args, open_text


class _HasMapping(Protocol):
    """An SQLAlchemy Row, without importing SQLAlchemy: its values by column name."""

    @property
    def _mapping(self) -> Mapping[Any, Any]: ...


Columns = Mapping[str, Any] | _HasMapping


def _values(row: Columns) -> Mapping[str, Any]:
    return row if isinstance(row, Mapping) else row._mapping


def decode(text: str | None, fmt: str | None) -> Any:
    """A content or output value as it was given: JSON text decoded when its format says so."""
    return json.loads(text) if fmt == "json" and text is not None else text


@dataclass(frozen=True)
class RunRow:
    """A run as stored."""

    id: str
    agent: str | None
    agent_name: str | None
    release: str | None
    task: str
    budgets: dict[str, Any]
    status: RunStatus
    stop_reason: StopReason | None
    output: Any
    error: str | None
    wrapped_up: bool
    steps: int
    tokens: int
    cost: float
    resumes: int
    deadline: datetime | None
    cancel_requested: bool
    lease_owner: str | None
    lease_epoch: int
    lease_expires_at: datetime | None
    leased_at: datetime | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    last_seen_at: datetime | None = None
    forked_from_id: str | None = None
    forked_at_step: int | None = None
    # Derived, not stored: the status, or `stalled` for a running run nobody holds any more
    # (see runner.store.liveness, which fills it in for the rows `Runner.row` and `list` return).
    state: str = ""
    waiting_since: datetime | None = None  # while waiting: since when
    wait_expires_at: datetime | None = None  # while waiting: when approval_timeout passes
    queue: str = DEFAULT_QUEUE  # the queue workers claim it from
    priority: int = 0  # higher is claimed first
    not_before: datetime | None = None  # a delayed run: claimed no earlier than this
    # Trees of runs: the run whose tool call started this one (None for a root), the tree's
    # root (a root's own id), and the key of the call that started it.
    parent_id: str | None = None
    root_id: str | None = None
    parent_call_key: str | None = None
    # What the runs below this one spent, charged to it as they spent it (revision 0013).
    below_steps: int = 0
    below_tokens: int = 0
    below_cost: float = 0.0
    undelivered_messages: int = 0  # messages sent to it and not in its journal yet
    # Why a check parked it (runner.store.releases): only its release's workers take it.
    parked_reason: str | None = None

    @classmethod
    def of(cls, row: Columns) -> RunRow:
        """The run from its row's values by column name (a mapping or SQLAlchemy's Row)."""
        m = _values(row)
        return cls(
            id=m["id"],
            agent=m["agent"],
            agent_name=m["agent_name"],
            release=m["release"],
            task=open_text(m["task"]) or "",
            budgets=dict(m["budgets"]),
            status=RunStatus(m["status"]),
            stop_reason=StopReason(m["stop_reason"]) if m["stop_reason"] else None,
            output=decode(open_text(m["output"]), m["output_format"]),
            error=m["error"],
            wrapped_up=bool(m["wrapped_up"]),
            steps=m["steps"],
            tokens=m["tokens"],
            cost=m["cost"],
            resumes=m["resumes"],
            deadline=m["deadline"],
            cancel_requested=bool(m["cancel_requested"]),
            lease_owner=m["lease_owner"],
            lease_epoch=m["lease_epoch"],
            lease_expires_at=m["lease_expires_at"],
            leased_at=m["leased_at"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            finished_at=m["finished_at"],
            last_seen_at=m["last_seen_at"],
            forked_from_id=m["forked_from_id"],
            forked_at_step=m["forked_at_step"],
            state=str(m["status"]),
            waiting_since=m["waiting_since"],
            wait_expires_at=m["wait_expires_at"],
            queue=m["queue"],
            priority=m["priority"],
            not_before=m["not_before"],
            parent_id=m["parent_id"],
            # A row written before revision 0010 by hand may have none: it is a root.
            root_id=m["root_id"] or m["id"],
            parent_call_key=m["parent_call_key"],
            below_steps=m.get("below_steps") or 0,
            below_tokens=m.get("below_tokens") or 0,
            below_cost=m.get("below_cost") or 0.0,
            undelivered_messages=m.get("undelivered_messages") or 0,
            parked_reason=m.get("parked_reason"),
        )

    def lease_is_live(self, at: datetime) -> bool:
        return lease_is_live(self.lease_owner, self.lease_expires_at, at)


def lease_is_live(owner: str | None, expires_at: datetime | None, at: datetime) -> bool:
    """Whether a lease held by `owner` until `expires_at` still holds at `at`: unexpired,
    and its holder not a process of this host known to be gone (runner.store.owner)."""
    if owner is None or expires_at is None:
        return False
    return expires_at > at and not is_dead(owner)


def entry_of(row: Columns) -> Entry:
    """A journal entry from its row's values by column name."""
    m = _values(row)
    return Entry(
        kind=EntryKind(m["kind"]),
        step=m["step"],
        counters=Counters(m["steps"], m["tokens"], m["cost"], m["error_streak"]),
        content=decode(open_text(m["content"]), m["content_format"]),
        action_type=ActionKind(m["action_type"]) if m["action_type"] else None,
        tool=m["tool"],
        args=open_args(m["args"]),
        is_error=bool(m["is_error"]),
        error=m["error"],
        idempotency_key=m["idempotency_key"],
        attempt=m["attempt"],
        tokens=m["usage_tokens"],
        cost=m["usage_cost"],
        waits_for=m["waits_for"],
        answer=m["answer"],
        answered_by=m["answered_by"],
        call_id=m["call_id"],
    )


@dataclass(frozen=True)
class DueQueued:
    """The queued runs due now in a worker's queues, as a drain that claimed nothing sees
    them right after: `held` by another transaction at that moment (a claim passes such a
    run over), or `free` (a claim may take it, unless a rule of its own leaves it: a full
    queue, another release, an agent that will not load)."""

    free: int = 0
    held: int = 0


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule as stored (see the table `schedules` in docs/reference/schema.md)."""

    name: str
    agent: str
    agent_name: str | None
    release: str | None
    task: str
    budgets: dict[str, Any]
    queue: str
    priority: int
    cron: str
    timezone: str
    catch_up: str
    overlap: str
    paused: bool
    next_tick_at: datetime
    last_tick_at: datetime | None
    last_run_id: str | None
    last_skip: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: Columns) -> ScheduleRow:
        m = _values(row)
        values = {name: m[name] for name in cls.__dataclass_fields__}
        values["budgets"] = dict(values["budgets"])
        values["task"] = open_text(values["task"])
        values["paused"] = bool(values["paused"])
        return cls(**values)


@dataclass(frozen=True)
class Fired:
    """What a worker did with one due tick: started `run_id`, or skipped it (`skipped`:
    `late`, `overlap`, or `exists` when a run of that id was there already)."""

    schedule: str
    tick: datetime
    run_id: str | None
    skipped: str | None


@dataclass(frozen=True)
class QueueInfo:
    """A queue as `runner queue list` shows it: its limit and how many runs it holds."""

    name: str
    limit: int | None  # most runs running at once; None: no limit
    queued: int  # ready to be claimed
    delayed: int  # queued, with a not_before still to come
    running: int  # running under a live lease: what the limit counts
    waiting: int  # waiting for a person's answer (holding no slot)
    keep_seconds: int | None = None  # retention: finished runs kept this long (its own rule)
    keep_runs: int | None = None  # retention: the newest this many finished runs kept
    # What a worker does with a run of the queue from another release than its own.
    older_releases: str = "continue"


@dataclass(frozen=True)
class LimitInfo:
    """A provider limit as `runner limit list` shows it: its settings, and its use over the
    minute up to now (what a reservation is checked against)."""

    name: str
    tokens_per_minute: int | None  # None: no token limit
    requests_per_minute: int | None  # None: no request limit
    concurrency: int | None  # calls in flight at once; None: no limit
    tokens: int  # charged in the last minute: usage of settled calls, estimates in flight
    requests: int  # model calls charged in the last minute
    in_flight: int  # calls reserved and not yet settled (under a live lease)
    waiting: int  # runs parked until the limit has room
    backoff_until: datetime | None  # a provider's Retry-After, shared; None or past: none

    @property
    def tokens_left(self) -> int | None:
        """Tokens that may still be reserved this minute (None: no token limit)."""
        if self.tokens_per_minute is None:
            return None
        return max(self.tokens_per_minute - self.tokens, 0)

    @property
    def requests_left(self) -> int | None:
        if self.requests_per_minute is None:
            return None
        return max(self.requests_per_minute - self.requests, 0)


# -- values as the columns hold them (both stores write rows so) ------------------------------

COUNTER_MAX = 2**63 - 1
# The epoch of the rows a fork was made with: every claim's epoch is 1 or more.
FORKED_EPOCH = 0
# The entries table's columns in their order (runner.sql.schema declares the table;
# tests/unit/test_rows.py holds the two to the same names).
ENTRY_COLUMNS = [
    "run_id", "seq", "step", "kind", "role", "content", "content_format", "action_type",
    "tool", "args", "is_error", "error", "idempotency_key", "attempt", "usage_tokens",
    "usage_cost", "steps", "tokens", "cost", "error_streak", "lease_epoch", "created_at",
    "waits_for", "answer", "answered_by", "call_id",
]  # fmt: skip


def encode(value: Any) -> tuple[str | None, str]:
    """A content or output value as (text, format): strings as they are, the rest as JSON.

    A string a database cannot hold (PostgreSQL's text takes no NUL; no UTF-8 encodes a
    lone surrogate) is kept as JSON too: json.dumps escapes both into plain ASCII.
    """
    if value is None or (isinstance(value, str) and _storable(value)):
        return value, "text"
    try:
        return json.dumps(value, allow_nan=False), "json"
    except (TypeError, ValueError):
        return json.dumps(str(value)), "json"


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():  # the common case, and free: CPython knows it without a scan
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def sealed(value: Any, payloads: Payloads) -> tuple[str | None, str]:
    """A content or output value as (column text, format): `encode`'s text through the
    store's codecs (the format stays plain: it says what the text is once opened)."""
    text, fmt = encode(value)
    return payloads.seal(text), fmt


def plain_text(text: str | None) -> str | None:
    """A message (an error's text) as a text column can hold it: NUL and lone surrogates
    written as escapes. Messages are for people; unlike content, they need not round-trip."""
    if text is None or _storable(text):
        return text
    escaped = text.replace("\x00", "\\x00")
    return escaped.encode("utf-8", "backslashreplace").decode("utf-8")


def counter(value: int) -> int:
    """A count as a column holds it: seed 000 adds any usage, the columns stop at 2**63-1."""
    return value if value <= COUNTER_MAX else COUNTER_MAX


def amount(value: float) -> float:
    """A cost as a column holds it (a sum of finite costs may overflow to infinity)."""
    return value if value <= sys.float_info.max else sys.float_info.max


# Each kind's role in the transcript (Entry.message's), without building the message.
_ROLES = {
    EntryKind.TASK: "user",
    EntryKind.WRAP_UP: "user",
    EntryKind.MESSAGE: "user",
    EntryKind.FINAL: "assistant",
    EntryKind.ACTION: "assistant",
    EntryKind.OBSERVATION: "tool",
}


def entry_row(
    run_id: str,
    seq: int,
    epoch: int,
    entry: Entry,
    at: datetime,
    payloads: Payloads = PLAIN,
) -> dict[str, Any]:
    """An entry's row of the entries table, by column name, its payloads sealed."""
    values = entry_values(run_id, seq, epoch, entry, at, payloads)
    return dict(zip(ENTRY_COLUMNS, values, strict=True))


def entry_values(
    run_id: str,
    seq: int,
    epoch: int,
    entry: Entry,
    at: datetime,
    payloads: Payloads = PLAIN,
) -> tuple[Any, ...]:
    """`entry_row`'s values in the entries table's column order (ENTRY_COLUMNS): what a
    positional driver takes, with no dict on the way (the journal's hot path). Its content
    and arguments pass through `payloads` (a blob is written before this returns)."""
    content, fmt = sealed(entry.content, payloads)
    c = entry.counters
    top = COUNTER_MAX
    return (
        run_id,
        seq,
        entry.step,
        str(entry.kind),
        _ROLES.get(entry.kind),
        content,
        fmt,
        entry.action_type,
        entry.tool,
        payloads.seal_args(entry.args),
        entry.is_error,
        plain_text(entry.error),
        entry.idempotency_key,
        entry.attempt,
        entry.tokens if entry.tokens <= top else top,  # counter(), inline: 6 calls a step
        amount(entry.cost),
        c.steps if c.steps <= top else top,
        c.tokens if c.tokens <= top else top,
        amount(c.cost),
        c.error_streak,
        epoch,
        at,
        entry.waits_for,
        entry.answer,
        plain_text(entry.answered_by),
        entry.call_id,
    )


def seal_task(row: Mapping[str, Any], payloads: Payloads) -> dict[str, Any]:
    """A run's (or a schedule's) row with its task sealed by `payloads` (a task sealed
    already, an envelope, is kept as it is)."""
    task = row["task"]
    return {**row, "task": task if is_envelope(task) else payloads.seal(task)}


def new_run(
    *,
    run_id: str,
    agent: str | None,
    agent_name: str | None,
    release: str | None,
    task: str,
    budgets: dict[str, Any],
    at: datetime,
    forked_from_id: str | None = None,
    forked_at_step: int | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    not_before: datetime | None = None,
    parent_id: str | None = None,
    root_id: str | None = None,
    parent_call_key: str | None = None,
    payloads: Payloads = PLAIN,
) -> dict[str, Any]:
    """The row of a run just submitted (queued, nothing spent), its task sealed by
    `payloads`. A child run names its parent, its tree's root and the key of the parent's
    call that started it; any other run is a root, and its root_id is its own id."""
    if (parent_id is None) != (root_id is None):
        raise ValueError("a child run names both its parent and its root; a root neither")
    return {
        "id": run_id,
        "agent": agent,
        "agent_name": agent_name,
        "release": release,
        "task": payloads.seal(task),
        "budgets": budgets,
        "status": RunStatus.QUEUED,
        "wrapped_up": False,
        "steps": 0,
        "tokens": 0,
        "cost": 0.0,
        "resumes": 0,
        "stalled_resumes": 0,
        "progress_seq": 0,
        "cancel_requested": False,
        "lease_epoch": 0,
        "created_at": at,
        "updated_at": at,
        "forked_from_id": forked_from_id,
        "forked_at_step": forked_at_step,
        "queue": queue,
        "priority": priority,
        "not_before": not_before,
        "parent_id": parent_id,
        "root_id": run_id if root_id is None else root_id,
        "parent_call_key": parent_call_key,
        "below_steps": 0,
        "below_tokens": 0,
        "below_cost": 0.0,
    }
