"""A run id is an idempotency key for the run itself: the same request returns the existing
run, a different one is refused with what differs.

The same request means the same agent, task and budgets (and, for a fork, the same run
forked from and step; for a request that names them, the same queue and priority). Budgets are
compared with those the run was created with, so repeating the original request still
names a run that was revived since with larger ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runner.core.budget_changes import before_changes
from runner.core.budgets import Budgets
from runner.core.journal import Entry
from runner.errors import RunConflict
from runner.store.rows import RunRow

_SHOWN = 40  # characters of a differing value quoted in the message


def differences(
    run: RunRow,
    *,
    agent: str | None,
    agent_name: str | None,
    task: str,
    budgets: Mapping[str, Any],
    later_changes: Iterable[Entry] = (),
    forked_from: tuple[str, int] | None = None,
    queue: str | None = None,
    priority: int | None = None,
) -> dict[str, tuple[Any, Any]]:
    """What differs between the stored run and a request for it: field -> (stored, asked).

    `later_changes` are the budget changes made after the run was created (revivals,
    extensions): asked budgets equal to the run's first ones are no difference. An agent is
    compared by reference when both sides have one, else by name when both have one. A
    queue or priority is compared when the request names one (None: whatever it is); when a
    delayed run may start never is, since `--in 10m` asked again names another time.
    """
    found: dict[str, tuple[Any, Any]] = {}
    if run.agent is not None and agent is not None:
        if run.agent != agent:
            found["agent"] = (run.agent, agent)
    elif run.agent_name is not None and agent_name is not None and run.agent_name != agent_name:
        found["agent"] = (run.agent_name, agent_name)
    if run.task != task:
        found["task"] = (run.task, task)
    asked = Budgets(**budgets).as_dict()
    now = Budgets(**run.budgets)
    first = before_changes(now, later_changes).as_dict()
    if asked not in (now.as_dict(), first):
        for name, value in asked.items():
            if value != first[name]:
                found[name] = (first[name], value)
    if queue is not None and run.queue != queue:
        found["queue"] = (run.queue, queue)
    if priority is not None and run.priority != priority:
        found["priority"] = (run.priority, priority)
    stored_fork = (run.forked_from_id, run.forked_at_step) if run.forked_from_id else None
    if forked_from is not None and stored_fork != forked_from:
        found["forked_from"] = (_fork(stored_fork), _fork(forked_from))
    return found


def conflict(run_id: str, found: dict[str, tuple[Any, Any]]) -> RunConflict:
    """The error for a request that differs from the run its id names."""
    detail = "; ".join(
        f"{_LABELS.get(name, name)} {_quoted(stored, name)} (asked: {_quoted(asked, name)})"
        for name, (stored, asked) in found.items()
    )
    named = ", ".join(_LABELS.get(name, name) for name in found)
    return RunConflict(
        f"run {run_id} already exists with another {named}: {detail}; "
        "a run id names one run: choose another id, or leave it out",
        run_id=run_id,
        differences=found,
    )


# How a difference is named in the message, where its key would read badly (a fork's
# origin is the run and step it was forked from).
_LABELS = {"forked_from": "origin"}


def _fork(origin: tuple[str | None, int | None] | None) -> str:
    return "none (not a fork)" if origin is None else f"run {origin[0]} at step {origin[1]}"


def _quoted(value: Any, name: str) -> str:
    quote = isinstance(value, str) and name != "forked_from"
    text = repr(value) if quote else "none" if value is None else str(value)
    text = " ".join(text.split())
    if len(text) <= _SHOWN:
        return text
    # The middle goes: a path's file and attribute are at its end, a text's start says most.
    head = _SHOWN // 3
    return text[:head] + "..." + text[len(text) - (_SHOWN - head - 3) :]
