"""Forks: a new run whose journal starts as a copy of another run's first N steps.

The copy is made by the store (in SQL, one INSERT ... SELECT) in the transaction that
creates the fork, so a fork is whole or absent. Copied rows are the parent's, byte for
byte, except their run id and `lease_epoch` 0 ("written when the run was forked"): they
keep their `created_at` and their idempotency keys (`<parent>-<step>`: a key names the call
that really ran). The fork's own calls, from step N + 1 on, get keys of their own
(`<fork>-<step>`). The parent is only read.

A fork starts with its parent's budgets as they are now (and any overrides); when those
differ from the budgets the copied steps ran with, an `extended` entry at the end of the
copy records the change, so the fork's replay of its copied steps is the parent's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.core.agent import with_budgets
from runner.core.budget_changes import before_changes, changed, describe, room_problems
from runner.core.budgets import Budgets
from runner.core.clock import utc_now
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.errors import CannotFork
from runner.store.protocol import RunStore
from runner.store.rows import FORKED_EPOCH as FORKED_EPOCH  # re-exported
from runner.store.rows import RunRow, new_run


@dataclass(frozen=True)
class Prefix:
    """The parent's first steps: how many entries to copy, and where they leave a run."""

    entries: int  # entries copied (seq 0 .. entries - 1)
    counters: Counters
    budgets: Budgets  # the budgets the copied steps ended under


def prefix(parent: RunRow, journal: Sequence[Entry], at_step: int) -> Prefix:
    """The first `at_step` steps of `parent`'s journal (CannotFork unless step `at_step`
    is a tool call with its result, or several with all of theirs: the fork goes on from
    there with step at_step + 1). The copy ends after the step's last result, so a step of
    several calls is copied whole, and none of its calls is pending in the fork."""
    if at_step < 0:
        raise CannotFork(f"--at-step must be 0 or more, not {at_step}")
    if at_step == 0:
        end = 1 if journal and journal[0].kind is EntryKind.TASK else 0
    else:
        step_end = _step_end(journal, at_step)
        if step_end is None:
            raise CannotFork(_no_step(parent.id, journal, at_step))
        end = step_end
        # A summary asked for before the next step's model call is of the copied steps
        # alone: the fork reuses it instead of asking again.
        while end < len(journal) and journal[end].kind is EntryKind.COMPACTION:
            end += 1
    counters = journal[end - 1].counters if end else Counters()
    # The budgets then: the parent's now, with the changes recorded after the copy undone.
    budgets = before_changes(Budgets(**parent.budgets), journal[end:])
    return Prefix(end, counters, budgets)


def fork_budgets(parent: RunRow, copied: Prefix, overrides: Mapping[str, Any]) -> Budgets:
    """The fork's budgets: the parent's now with `overrides`; CannotFork if they would stop
    the fork at once."""
    budgets = with_budgets(overrides, Budgets(**parent.budgets))
    problems = room_problems(budgets, copied.counters)
    if problems:
        raise CannotFork(
            f"a fork of run {parent.id} at step {copied.counters.steps} would stop at once: "
            f"{'; '.join(problems)}"
        )
    return budgets


def create_fork(
    store: RunStore,
    parent: RunRow,
    copied: Prefix,
    *,
    run_id: str,
    agent: str | None,
    agent_name: str | None,
    release: str | None,
    budgets: Budgets,
) -> bool:
    """Insert the fork, queued, with its copy of the parent's first steps, in one
    transaction; False (and nothing written) when the id is taken."""
    at_step = copied.counters.steps
    row = new_run(
        run_id=run_id,
        agent=agent,
        agent_name=agent_name,
        release=release,
        task=parent.task,
        budgets=budgets.as_dict(),
        at=utc_now(store.clock),
        forked_from_id=parent.id,
        forked_at_step=at_step,
        # A fork left to a worker waits in its parent's queue, at its priority.
        queue=parent.queue,
        priority=parent.priority,
    )
    changes = changed(copied.budgets, budgets)
    extra = None
    if changes:
        note = f"forked from run {parent.id} at step {at_step}: {describe(changes)}"
        record = {"budgets": changes, "forked_from": parent.id, "at_step": at_step}
        extra = Entry(EntryKind.EXTENDED, at_step, copied.counters, content=note, args=record)
    return store.create_fork(row, parent.id, copied.entries, extra)


def _step_end(journal: Sequence[Entry], step: int) -> int | None:
    """Where the copy of `step` ends: just after the last result of its calls, when every
    call of the step has one (a step of several calls records its results as they end, in
    any order); None when the step is not a tool call with all its results."""
    calls: set[str | None] = set()
    results: set[str | None] = set()
    end = None
    for i, entry in enumerate(journal):
        if entry.step != step:
            continue
        if entry.kind is EntryKind.ACTION:
            calls.add(entry.idempotency_key)
        elif entry.kind is EntryKind.OBSERVATION:
            results.add(entry.idempotency_key)
            end = i + 1
    if not calls or not calls <= results:
        return None
    return end


def _no_step(run_id: str, journal: Sequence[Entry], at_step: int) -> str:
    complete = [e.step for e in journal if e.kind is EntryKind.OBSERVATION]
    last = complete[-1] if complete else 0
    step = [e for e in journal if e.step == at_step]
    kinds = {e.kind for e in step}
    calls = sum(e.kind is EntryKind.ACTION for e in step)
    unanswered = sum(e.kind is EntryKind.WAIT for e in step) > sum(
        e.kind is EntryKind.ANSWER for e in step
    )
    if EntryKind.FINAL in kinds:
        what = f"step {at_step} of run {run_id} is its final answer"
    elif EntryKind.REFUSED in kinds:
        what = f"step {at_step} of run {run_id} is an action a stop rule refused"
    elif unanswered:
        what = f"step {at_step} of run {run_id} is a call that waits for a person's answer"
    elif calls > 1:
        done = sum(e.kind is EntryKind.OBSERVATION for e in step)
        what = (
            f"step {at_step} of run {run_id} is {calls} tool calls, {calls - done} of them "
            "with no result yet"
        )
    elif EntryKind.ACTION in kinds:
        what = f"step {at_step} of run {run_id} is a tool call with no result yet"
    else:
        what = f"run {run_id} has no step {at_step}"
    return f"{what}: fork at a step whose tool calls have their results (0 to {last})"
