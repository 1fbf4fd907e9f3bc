"""Budget changes as the journal records them, and the rules a new budget must meet.

A stopped run continued with new budgets (a revival) and an unfinished run given new ones
(an extension) each leave one journal entry, kind `revived` or `extended`, whose `args`
hold `{"budgets": {name: [before, after], ...}, ...}`. The entry is never shown to the
model. When the loop replays a journal it starts from the budgets before every recorded
change and applies each change where it was recorded, so each step is replayed under the
budgets it ran with: a stop that a revival lifted is replayed as a stop, then lifted.

No SQL here: the loop reads these entries, the store writes them (runner.revival).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace
from typing import Any

from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.stop_reasons import StopReason

CHANGE_KINDS = (EntryKind.REVIVED, EntryKind.EXTENDED)

# The budget whose limit each revivable stop names: a revival must lift it. crash_loop
# names none: it counts takeovers, and a revival starts that count again.
LIMIT_OF = {
    StopReason.MAX_STEPS: "max_steps",
    StopReason.TOKEN_BUDGET: "max_tokens",
    StopReason.COST_BUDGET: "max_cost",
    StopReason.TIME_BUDGET: "max_seconds",
    StopReason.REPEATED_CALL: "max_repeats",
    StopReason.TOOL_ERRORS: "max_consecutive_errors",
}
REVIVABLE = frozenset({*LIMIT_OF, StopReason.CRASH_LOOP})


def changed(before: Budgets, after: Budgets) -> dict[str, list[Any]]:
    """The budgets that differ, as the journal records them: name -> [before, after]."""
    old, new = before.as_dict(), after.as_dict()
    return {name: [old[name], new[name]] for name in old if old[name] != new[name]}


def changes_of(entry: Entry) -> dict[str, tuple[Any, Any]]:
    """What a `revived` or `extended` entry changed: name -> (before, after)."""
    recorded = (entry.args or {}).get("budgets") or {}
    return {name: (pair[0], pair[1]) for name, pair in recorded.items()}


def applied(budgets: Budgets, entry: Entry) -> Budgets:
    """`budgets` after the change `entry` records."""
    return replace(budgets, **{name: new for name, (_, new) in changes_of(entry).items()})


def before_changes(budgets: Budgets, entries: Iterable[Entry]) -> Budgets:
    """`budgets` with every change recorded in `entries` undone: what the journal began with."""
    changes = [entry for entry in entries if entry.kind in CHANGE_KINDS]
    if not changes:  # a new run's, or one never changed: the same budgets, checked already
        return budgets
    values = budgets.as_dict()
    for entry in reversed(changes):
        for name, (old, _) in changes_of(entry).items():
            values[name] = old
    return Budgets(**values)


def describe(changes: dict[str, list[Any]]) -> str:
    """`max_steps 8 -> 50, max_tokens 10000 -> none`, or `no budget changed`."""
    if not changes:
        return "no budget changed"
    return ", ".join(f"{name} {_value(a)} -> {_value(b)}" for name, (a, b) in changes.items())


def _value(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def room_problems(budgets: Budgets, spent: Counters) -> list[str]:
    """Why `budgets` would stop a run that has spent `spent` before its next step."""
    problems = []
    if budgets.max_steps <= spent.steps:
        problems.append(
            f"max_steps {budgets.max_steps} leaves no step: the run has taken {spent.steps}"
        )
    if budgets.max_tokens is not None and spent.tokens > budgets.max_tokens:
        problems.append(f"max_tokens {budgets.max_tokens} is below the {spent.tokens} spent")
    if budgets.max_cost is not None and spent.cost > budgets.max_cost:
        problems.append(f"max_cost {budgets.max_cost:g} is below the {spent.cost:g} spent")
    limit = budgets.max_consecutive_errors
    if limit is not None and spent.error_streak > limit:
        problems.append(
            f"max_consecutive_errors {limit} is below the {spent.error_streak} failed steps "
            "in a row"
        )
    return problems


def lift_problems(
    stop: StopReason, before: Budgets, after: Budgets, given: Collection[str]
) -> list[str]:
    """Why `after` would not lift `stop` (beyond leaving no room, which room_problems says)."""
    if stop is StopReason.TIME_BUDGET and "max_seconds" not in given:
        return ["give --max-seconds: a new wall-clock budget counts from the revival"]
    if stop is StopReason.REPEATED_CALL:
        old, new = before.max_repeats, after.max_repeats
        if new is not None and (old is None or new <= old):
            return [f"max_repeats {new} does not raise the limit the run hit ({old})"]
    return []
