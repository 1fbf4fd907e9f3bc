"""What a reader makes of a run's rows: the waits its journal leaves open, and its result so
far. A leaf for the reading commands (`runner list`, `show`): it loads none of the store's
rules for claims, limits and answers (runner.store.rules, which re-exports these)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, transcript_of
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.waiting import Asks, Wait
from runner.store.rows import RunRow


def unanswered(tail: Sequence[tuple[Entry, int, datetime]]) -> list[tuple[Entry, datetime]]:
    """The waits of `tail` (the waits and answers a journal ends with: reads.wait_rows) that
    have no answer yet, in call order, each with when it was written."""
    answered = {entry.idempotency_key for entry, _, _ in tail if entry.kind is EntryKind.ANSWER}
    return [
        (entry, at)
        for entry, _, at in tail
        if entry.kind is EntryKind.WAIT and entry.idempotency_key not in answered
    ]


def wait_of(run: RunRow, entry: Entry, at: datetime) -> Wait:
    """The wait that `entry` (a wait of the run's last step, written at `at`) opened."""
    assert entry.tool is not None and entry.idempotency_key is not None
    return Wait(
        run_id=run.id,
        step=entry.step,
        call=entry.idempotency_key,
        tool=entry.tool,
        args=dict(entry.args or {}),
        asks=Asks(str(entry.waits_for)),
        question=str(entry.content),
        since=run.waiting_since or at,
        expires_at=run.wait_expires_at,
    )


def result_of(run: RunRow, journal: Sequence[Entry], waits: Sequence[Wait]) -> AgentResult:
    """The run's result so far (stop_reason None while it has not stopped), from its row,
    its journal and the calls it waits for."""
    transcript = transcript_of(list(journal))
    # A finished run stores its final counters; an unfinished one has them in its journal.
    counters = Counters(run.steps, run.tokens, run.cost)
    if run.status is not RunStatus.FINISHED and journal:
        counters = journal[-1].counters
    return AgentResult(
        stop_reason=run.stop_reason,
        output=run.output,
        steps=counters.steps,
        transcript=transcript,
        tokens=counters.tokens,
        cost=counters.cost,
        error=run.error,
        wrapped_up=run.wrapped_up,
        run_id=run.id,
        status=run.status,
        waiting=waits[0] if waits else None,
        waits=list(waits),
    )
