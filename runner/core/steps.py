"""A step's action as journal entries, and back: the rows the loop records for what the
model asked, and the action a resumed run rebuilds from them.

A tool call's action row holds the call (tool, args, key, the provider's id) and, in
`content`, the text the model gave beside it. A step of several calls is one row per call,
the model's usage and text on the first only, so summing usage over the journal counts
each model call once.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.core.actions import Action, ActionKind, Call, canonical_json
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind


def action_entry(
    kind: EntryKind, step: int, counters: Counters, action: Action, *, key: str | None = None
) -> Entry:
    if action.kind is ActionKind.FINAL:
        content = action.content
    else:  # what the model said beside its call, or its malformed output
        content = action.raw if action.kind is ActionKind.INVALID else action.text
    return Entry(
        kind,
        step,
        counters,
        content=content,
        action_type=action.kind,
        tool=action.tool,
        args=action.args,
        is_error=action.kind is ActionKind.INVALID,
        error=action.error,
        idempotency_key=key if action.kind is ActionKind.TOOL else None,
        tokens=action.tokens,
        cost=action.cost,
        call_id=action.call_id,
    )


def refused_entries(kind: EntryKind, step: int, counters: Counters, action: Action) -> list[Entry]:
    """A refused action's rows: one, or one per call of a step of several."""
    if action.calls:
        return call_entries(kind, step, counters, action, None)
    return [action_entry(kind, step, counters, action)]


def call_entries(
    kind: EntryKind, step: int, counters: Counters, action: Action, run_id: str | None
) -> list[Entry]:
    """One row per call of a step of several, the model's usage and text on the first.

    Call n's key is `<run_id>-<step>.<n>`: unique in the run, the same on every resume,
    and never that of a single-call step (`<run_id>-<step>`).
    """
    return [
        Entry(
            kind,
            step,
            counters,
            content=action.text if n == 1 else None,
            action_type=ActionKind.TOOL,
            tool=call.tool,
            args=call.args,
            idempotency_key=None if run_id is None else f"{run_id}-{step}.{n}",
            tokens=action.tokens if n == 1 else 0,
            cost=action.cost if n == 1 else 0.0,
            call_id=call.id,
        )
        for n, call in enumerate(action.calls, 1)
    ]


def observation_entry(
    call: Entry, counters: Counters, content: str, is_error: bool, attempt: int
) -> Entry:
    return Entry(
        EntryKind.OBSERVATION,
        call.step,
        counters,
        content=content,
        tool=call.tool,
        is_error=is_error,
        idempotency_key=call.idempotency_key,
        attempt=attempt,
        call_id=call.call_id,
    )


def action_of(rows: Sequence[Entry]) -> Action:
    """The action a step's recorded rows hold, as the model first gave it."""
    entry = rows[0]
    if entry.action_type is ActionKind.FINAL:
        return Action(ActionKind.FINAL, content=entry.content, tokens=entry.tokens, cost=entry.cost)
    if entry.action_type is ActionKind.TOOL and len(rows) > 1:
        calls = tuple(Call(row.tool or "", row.args or {}, row.call_id) for row in rows)
        return Action(
            ActionKind.TOOL, tokens=entry.tokens, cost=entry.cost, text=entry.content, calls=calls
        )
    if entry.action_type is ActionKind.TOOL:
        args = entry.args or {}
        return Action(
            ActionKind.TOOL,
            tool=entry.tool,
            args=entry.args,
            tokens=entry.tokens,
            cost=entry.cost,
            call_id=entry.call_id,
            text=entry.content,
            # Made once: the stop rules ask for the call's signature twice a step.
            canonical_args=canonical_json(args),
        )
    return Action(
        ActionKind.INVALID,
        tool=entry.tool,
        error=entry.error,
        raw=entry.content,
        tokens=entry.tokens,
        cost=entry.cost,
    )
