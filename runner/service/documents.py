"""The JSON documents every face gives of runs, waits, answers, messages and events: what `runner
show --json`, `runner tail --json` and the HTTP API (`runner ui`'s `/api/`) print alike.

Plain dicts of JSON values (times as ISO 8601 in UTC); nothing here loads SQLAlchemy, so
the CLI's fast paths may use it.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.core.messages import Sent
    from runner.core.result import AgentResult
    from runner.core.waiting import Answered, Wait
    from runner.service.events import DeltaEvent, Event
    from runner.store.rows import RunRow
    from runner.store.scores import ScoreRow

# The fields an AgentResult and a RunRow share, under the same names.
_OUTCOME = ("status", "stop_reason", "output", "steps", "tokens", "cost", "error", "wrapped_up")
# An entry's counters: the run's totals after it.
_COUNTERS = ("steps", "tokens", "cost", "error_streak")


def run_json(
    result: AgentResult | None,
    row: RunRow | None = None,
    *,
    transcript: bool = False,
    wait: Wait | None = None,
) -> dict[str, Any]:
    """The machine-readable form of a run (`wait`: what it waits for, if not in `result`)."""
    data: dict[str, Any] = {}
    # How the run ended (or stands): from the result when there is one, else from the row.
    source = result if result is not None else row
    if source is not None:
        data["id"] = result.run_id if result is not None else row.id if row else None
        data.update({name: getattr(source, name) for name in _OUTCOME})
    if row is not None:
        data.update(
            state=row.state or str(row.status),
            agent=row.agent,
            agent_name=row.agent_name,
            release=row.release,
            task=row.task,
            budgets=row.budgets,
            resumes=row.resumes,
            cancel_requested=row.cancel_requested,
            worker=row.lease_owner,
            worker_since=iso(row.leased_at) if row.lease_owner else None,
            last_seen_at=iso(row.last_seen_at),
            lease_expires_at=iso(row.lease_expires_at),
            forked_from_id=row.forked_from_id,
            forked_at_step=row.forked_at_step,
            parent_id=row.parent_id,
            root_id=row.root_id,
            parent_call_key=row.parent_call_key,
            queue=row.queue,
            priority=row.priority,
            not_before=iso(row.not_before),
            created_at=iso(row.created_at),
            finished_at=iso(row.finished_at),
        )
    if transcript and result is not None:
        data["transcript"] = result.transcript
    if source is not None:
        if wait is None and result is not None:
            wait = result.waiting
        data["waiting"] = wait_json(wait) if wait is not None else None
        if result is not None and result.waits:  # every call it waits for, `waiting` first
            data["waits"] = [wait_json(each) for each in result.waits]
    return data


def wait_json(wait: Wait) -> dict[str, Any]:
    """What a waiting run waits for, and the commands that answer it."""
    return {
        "asks": str(wait.asks),
        "call": wait.call,
        "step": wait.step,
        "tool": wait.tool,
        "args": wait.args,
        "question": wait.question,
        "since": iso(wait.since),
        "expires_at": iso(wait.expires_at),
        "answer_with": answer_commands(wait),
    }


def answer_commands(wait: Wait) -> list[str]:
    """The exact commands that answer a wait (naming the call, so an answer never lands on
    a later wait of the same run that its author has not seen)."""
    if str(wait.asks) == "child":  # answered by the child run's end: look at it, or run it
        from runner.core.tree import child_run_id

        child = child_run_id(wait.run_id, wait.call)
        return [f"runner show {child}", f"runner resume {child}"]
    target = f"{wait.run_id} --call {wait.call}"
    deny = f"runner deny {target} --reason TEXT"
    if str(wait.asks) == "reply":
        return [f"runner reply {target} TEXT", deny]
    return [f"runner approve {target}", deny]


def answered_json(answered: Answered) -> dict[str, Any]:
    """An answer as recorded: which call, what, by whom, when, and what still waits."""
    return {
        "id": answered.run_id,
        "call": answered.call,
        "answer": str(answered.answer),
        "by": answered.by,
        "at": answered.at.isoformat(),
        "text": answered.text,
        "still_waiting": list(answered.still_waiting),
    }


def sent_json(sent: Sent) -> dict[str, Any]:
    """A message in a run's inbox (`runner send`): its key, its place, and what became of it."""
    return {
        "id": sent.run_id,
        "key": sent.key,
        "number": sent.number,
        "sent_at": sent.sent_at.isoformat(),
        "status": str(sent.status),
        "duplicate": sent.duplicate,
        "delivered": sent.delivered_seq is not None,
        "revived": sent.revived,
    }


def event_json(event: Event) -> dict[str, Any]:
    """One event of a run's stream: its position, the entry's fields whole, and the run's
    counters after it."""
    entry = event.entry
    data: dict[str, Any] = {"event": "entry", "position": event.position, "run_id": event.run_id}
    for field in fields(entry):
        value = getattr(entry, field.name)
        if field.name == "counters":
            value = {name: getattr(value, name) for name in _COUNTERS}
        elif isinstance(value, Enum):
            value = value.value
        data[field.name] = value
    return data


def delta_json(event: DeltaEvent) -> dict[str, Any]:
    """One delta of a run's stream: a piece of the model call in flight. No `position`: a
    delta is not durable; `after` is the position of the last durable event before it."""
    delta = event.delta
    return {
        "event": "delta",
        "run_id": event.run_id,
        "after": event.after,
        "step": delta.step,
        "ordinal": delta.ordinal,
        "part": delta.part,
        "call": delta.call,
        "tool": delta.tool,
        "text": delta.text,
    }


def score_json(row: ScoreRow) -> dict[str, Any]:
    """A run's score: `value` NULL until it is scored (or if its scorer failed)."""
    return {
        "run_id": row.run_id,
        "name": row.name,
        "status": str(row.status),
        "value": row.value,
        "note": row.note,
        "source": str(row.source),
        "attempts": row.attempts,
        "scored_at": iso(row.scored_at),
    }


def iso(value: datetime | None) -> str | None:
    """A time as ISO 8601 in UTC (None stays None)."""
    return value.astimezone(UTC).isoformat() if value is not None else None
