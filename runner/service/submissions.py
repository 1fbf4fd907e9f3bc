"""Bulk submit (`Runner.submit_many`, `runner submit --from`): thousands of runs in seconds.

Every item is checked before anything is written, and so is every run id that exists
already (the same request is fine and is not submitted again; another request is refused),
so a bad item or a conflict submits nothing. Then the runs go in batches, each ONE
transaction of multi-row INSERTs: a batch that fails (a database error, or an id that
another process took since the check) leaves nothing of itself, and the batches before it
stay submitted, as `SubmitInterrupted` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runner.core.agent import with_budgets
from runner.core.budget_changes import CHANGE_KINDS
from runner.core.budgets import Budgets
from runner.core.ids import new_run_id
from runner.defaults import DEFAULT_QUEUE
from runner.errors import RunConflict, SubmissionRefused, SubmitInterrupted, first_line
from runner.service.conflicts import conflict, differences
from runner.service.delays import start_time
from runner.store.protocol import RunStore
from runner.store.rows import RunRow, new_run
from runner.store.rules import check_priority, check_queue

BATCH_SIZE = 1000
# What an item may say; anything else is refused (a typo should not pass unnoticed).
ITEM_KEYS = ("task", "id", "budgets", "queue", "priority", "delay", "not_before")


@dataclass(frozen=True)
class Submitted:
    """What a bulk submit did: every item's run id, in order, and which of them existed
    already (with the same request), so were not submitted again."""

    ids: list[str]
    existing: list[str]

    @property
    def created(self) -> int:
        return len(self.ids) - len(self.existing)


@dataclass(frozen=True)
class Placement:
    """Where a submitted run waits: its queue and priority as asked (None: the defaults,
    and not compared with an existing run's), and when it may start."""

    queue: str | None = None
    priority: int | None = None
    not_before: datetime | None = None


@dataclass(frozen=True)
class Item:
    """One run to submit, checked: its row, and what its request compares on."""

    number: int
    row: dict[str, Any]
    given_id: bool
    queue: str | None  # as asked: None when the item left it to the default
    priority: int | None


def check_task(task: object) -> str:
    if not isinstance(task, str):
        raise ValueError(f"task must be a string, not {type(task).__name__}")
    if "\x00" in task:
        # runs.task is plain text for SQL users, and PostgreSQL's text holds no NUL.
        raise ValueError("task must not contain a NUL character")
    return task


def prepare(
    tasks: Iterable[str | Mapping[str, Any]],
    *,
    ref: str,
    agent_name: str | None,
    release: str | None,
    base: Budgets,
    now: datetime,
    check_id: Any,
) -> list[Item]:
    """Every item checked and made a row; SubmissionRefused naming the first bad one."""
    items: list[Item] = []
    first_seen: dict[str, int] = {}
    for number, given in enumerate(tasks, start=1):
        try:
            item = _item(given, number, ref, agent_name, release, base, now, check_id)
        except (ValueError, TypeError) as exc:
            raise SubmissionRefused(str(exc), item=number) from None
        run_id = item.row["id"]
        if run_id in first_seen:
            raise SubmissionRefused(
                f"run id {run_id} is given twice (first by item {first_seen[run_id]})",
                item=number,
            )
        first_seen[run_id] = number
        items.append(item)
    return items


def _item(
    given: str | Mapping[str, Any],
    number: int,
    ref: str,
    agent_name: str | None,
    release: str | None,
    base: Budgets,
    now: datetime,
    check_id: Any,
) -> Item:
    fields: Mapping[str, Any] = {"task": given} if isinstance(given, str) else given
    if not isinstance(fields, Mapping):
        raise ValueError(f"an item is a task or a mapping, not {type(given).__name__}")
    unknown = sorted(str(key) for key in fields if key not in ITEM_KEYS)
    if unknown:
        raise ValueError(f"unknown field {', '.join(unknown)}; known: {', '.join(ITEM_KEYS)}")
    if "task" not in fields:
        raise ValueError("no task")
    task = check_task(fields["task"])
    budgets = fields.get("budgets") or {}
    if not isinstance(budgets, Mapping):
        raise ValueError(f"budgets must be a mapping, not {type(budgets).__name__}")
    chosen = with_budgets(budgets, base)
    queue = fields.get("queue")
    priority = fields.get("priority")
    given_id = fields.get("id")
    run_id = check_id(given_id) if given_id is not None else new_run_id()
    row = new_run(
        run_id=run_id,
        agent=ref,
        agent_name=agent_name,
        release=release,
        task=task,
        budgets=chosen.as_dict(),
        # A microsecond apart: runs of one priority are claimed in the order given.
        at=now + timedelta(microseconds=number),
        queue=DEFAULT_QUEUE if queue is None else check_queue(queue),
        priority=0 if priority is None else check_priority(priority),
        not_before=start_time(now, fields.get("not_before"), fields.get("delay")),
    )
    return Item(number, row, given_id is not None, queue, priority)


def refuse_another(
    existing: RunRow,
    runs: RunStore,
    agent: str | None,
    agent_name: str | None,
    task: str,
    budgets: Mapping[str, Any],
    queue: str | None = None,
    priority: int | None = None,
    *,
    forked_from: tuple[str, int] | None = None,
) -> None:
    """RunConflict unless the stored run is what this request for its id asks for.

    Budget changes made since the run was created are read from its journal (a fork's own,
    copied with its steps, are part of what it was created with)."""
    from runner.service.fork import FORKED_EPOCH  # here: `runner list` and `show` never load forks

    later = [
        entry
        for entry, epoch in runs.load_entries(existing.id, CHANGE_KINDS)
        if epoch != FORKED_EPOCH
    ]
    found = differences(
        existing,
        agent=agent,
        agent_name=agent_name,
        task=task,
        budgets=budgets,
        later_changes=later,
        forked_from=forked_from,
        queue=queue,
        priority=priority,
    )
    if found:
        raise conflict(existing.id, found)


def submit_items(
    runs: RunStore, items: Sequence[Item], *, batch_size: int = BATCH_SIZE, wake: bool = True
) -> Submitted:
    """Check the ids that exist, then insert the rest in batches (see the module's doc)."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    named = [item.row["id"] for item in items if item.given_id]
    stored = runs.existing_runs(named) if named else {}
    existing: list[str] = []
    for item in items:
        run = stored.get(item.row["id"])
        if run is None:
            continue
        row = item.row
        try:
            refuse_another(
                run,
                runs,
                row["agent"],
                row["agent_name"],
                row["task"],
                row["budgets"],
                item.queue,
                item.priority,
            )
        except RunConflict as clash:
            raise SubmissionRefused(str(clash), item=item.number) from None
        existing.append(run.id)
    fresh = [item for item in items if item.row["id"] not in stored]
    submitted: list[str] = []
    for at in range(0, len(fresh), batch_size):
        batch = fresh[at : at + batch_size]
        try:
            runs.insert_runs([item.row for item in batch], wake=wake)
        except runs.outages as exc:
            raise SubmitInterrupted(
                f"its batch of {len(batch)} failed: {first_line(exc)}",
                item=batch[0].number,
                submitted=submitted,
            ) from exc
        submitted.extend(item.row["id"] for item in batch)
    if len(submitted) >= batch_size:
        runs.refresh_statistics()
    return Submitted([item.row["id"] for item in items], existing)
