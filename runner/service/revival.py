"""New budgets for a run: revive a stopped one, extend an unfinished one.

Each is one transaction: a journal entry (`revived` or `extended`, see
runner.budget_changes) and the run's new budgets. A revival also gives the run back to the
queue, its earlier stop kept in the entry: the run's row then says how it stops next. The
entry is not fenced by a lease, as the journal's writes are: nobody holds a finished run
(its last holder finished it, or a claim that found a crash loop raised the epoch past a
holder that only seemed dead), and the revival takes the run's row lock. An extension is
written by the claim that holds the run, under its epoch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.core.agent import with_budgets
from runner.core.budget_changes import REVIVABLE, changed, describe, lift_problems, room_problems
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.errors import CannotContinue, LeaseLost
from runner.store.protocol import BudgetChange, Claim, RunStore
from runner.store.rows import RunRow

Tail = Sequence[tuple[int, Entry]]


def revive_run(store: RunStore, run_id: str, overrides: Mapping[str, Any]) -> RunRow:
    """Queue a stopped run again with `overrides` applied to its budgets.

    Refused (CannotContinue) unless it stopped for a budget (whose limit `overrides` must
    lift), for tool_errors, or for crash_loop; or when its last step was a wrap-up answer.
    """
    return store.change_budgets(run_id, lambda run, tail, _at: revival(run, tail, overrides))


def revival(
    run: RunRow, tail: Tail, overrides: Mapping[str, Any], *, message: bool = False
) -> BudgetChange:
    """What reviving `run` (its last entries `tail`, newest first) writes, or why not.

    With `message` (a message sent with `--revive` waits in its inbox), a run that answered
    (`final`) may be revived too: the message gives it something new to answer.
    """
    if run.status is not RunStatus.FINISHED:
        raise CannotContinue(f"run {run.id} has not stopped ({run.status}): resume it")
    stop = run.stop_reason
    assert stop is not None
    if stop not in REVIVABLE and not (message and stop is StopReason.FINAL):
        raise CannotContinue(_not_revivable(run.id, stop))
    if run.wrapped_up or any(entry.kind is EntryKind.WRAP_UP for _, entry in tail):
        raise CannotContinue(
            f"run {run.id} ended with a wrap-up call after {stop}: it cannot go on from "
            "there; fork it from an earlier step (`runner fork`)"
        )
    seq, step, spent = _position(tail)
    before = Budgets(**run.budgets)
    after = with_budgets(overrides, before)
    problems = lift_problems(stop, before, after, overrides) + room_problems(after, spent)
    if problems:
        raise CannotContinue(f"run {run.id} stopped with {stop}: {'; '.join(problems)}")
    changes = changed(before, after)
    note = f"revived after {stop}{' by a message' if message else ''}: {describe(changes)}"
    record = {
        "budgets": changes,
        "stop_reason": str(stop),
        "error": run.error,
        "finished_at": _iso(run.finished_at),
    }
    # Under the epoch that finished the run: nobody holds it, and the next claim raises
    # the epoch anyway (a revival is no attempt at a pending call).
    entry = Entry(EntryKind.REVIVED, step, spent, content=note, args=record)
    values: dict[str, Any] = {
        "status": RunStatus.QUEUED,
        "stop_reason": None,
        "output": None,
        "output_format": None,
        "error": None,
        "wrapped_up": False,
        "finished_at": None,
        "budgets": after.as_dict(),
        # A wall-clock budget counts from the revival: set at the next claim.
        "deadline": None,
        # The takeovers that led to crash_loop are forgiven: their count starts again.
        "stalled_resumes": 0,
        "progress_seq": seq + 1,
        "lease_owner": None,
        "lease_expires_at": None,
    }
    return BudgetChange(entry, values)


def extend_run(store: RunStore, claim: Claim, overrides: Mapping[str, Any]) -> Claim:
    """Change the budgets of an unfinished run this claim holds; the claim with them.

    A new max_seconds counts from now. Budgets that leave the run no room for its next
    step are refused (CannotContinue); budgets equal to the run's change nothing.
    """
    written: list[int] = []

    def decide(run: RunRow, tail: Tail, at: datetime) -> BudgetChange | None:
        change = extension(run, tail, claim.epoch, overrides, at)
        if change is not None:
            written.append(_position(tail)[0])
        return change

    fresh = store.change_budgets(claim.run.id, decide)
    if not written:
        return claim
    return Claim(fresh, claim.epoch, written[0] + 1, crash_loop=False, stalled=claim.stalled)


def extension(
    run: RunRow, tail: Tail, epoch: int, overrides: Mapping[str, Any], at: datetime
) -> BudgetChange | None:
    """What extending `run` (held under `epoch`) writes; None when nothing changes."""
    if run.lease_epoch != epoch or run.status is not RunStatus.RUNNING:
        raise LeaseLost(f"run {run.id} was taken over by another worker: not extending it")
    before = Budgets(**run.budgets)
    after = with_budgets(overrides, before)
    _seq, step, spent = _position(tail)
    problems = room_problems(after, spent)
    if problems:
        raise CannotContinue(f"run {run.id}: {'; '.join(problems)}")
    changes = changed(before, after)
    if not changes and "max_seconds" not in overrides:
        return None
    entry = Entry(
        EntryKind.EXTENDED,
        step,
        spent,
        content=f"budgets changed: {describe(changes)}",
        args={"budgets": changes},
    )
    values: dict[str, Any] = {"budgets": after.as_dict()}
    if "max_seconds" in overrides:
        seconds = after.max_seconds
        values["deadline"] = None if seconds is None else at + timedelta(seconds=seconds)
    return BudgetChange(entry, values)


def _position(tail: Tail) -> tuple[int, int, Counters]:
    """Where the next entry goes: its seq, the step it follows, the counters so far."""
    if not tail:
        return 0, 0, Counters()
    seq, last = tail[0]
    return seq + 1, last.counters.steps, last.counters


def _not_revivable(run_id: str, stop: StopReason) -> str:
    if stop is StopReason.FINAL:
        return f"run {run_id} answered (final): there is nothing to continue; fork it instead"
    if stop is StopReason.CANCELLED:
        return f"run {run_id} was cancelled on request: fork it to run it again"
    return (
        f"run {run_id} stopped with {stop}, which new budgets do not lift: fork it from its "
        "last step to try again"
    )


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None
