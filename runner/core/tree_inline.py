"""Sub-agents in memory: a child run driven inline, inside its parent's tool call.

`run_agent` has no store to park in, so a sub-agent's call runs its child right there
(`runner.core.agent.SubAgent.run`, which drives the loop), on an in-memory journal that
charges everything the child spends to the runs above it as it spends it (runner.core.tree),
and stops the child when one of them runs out. This module is what the loop hands down to
that call: the run the child runs under, and how the child starts under it. It stands below
the loop and the agent, and imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.core.budgets import Budgets
from runner.core.clock import SYSTEM, Clock
from runner.core.journal import MemoryJournal
from runner.core.stop_rules import StopRules
from runner.core.tree import Ancestor, Charged, spawn_budgets


class SubAgentStopped(Exception):
    """A sub-agent called by hand (outside a run) stopped without an answer."""


@dataclass(frozen=True)
class InlineParent:
    """The run an inline child runs under: its rules (budgets, counters, what was charged
    below it), where it stands, and how it stops."""

    run_id: str
    rules: StopRules
    depth: int
    above: tuple[Charged, ...]
    remaining: Callable[[], float | None]  # seconds before the parent's deadline
    cancelled: Callable[[], bool]
    clock: Clock = SYSTEM

    def charge(self, spent: Any) -> None:
        self.rules.charge(spent)

    def ancestor(self) -> Ancestor:
        return Ancestor(self.run_id, self.rules.budgets.as_dict(), self.rules.spent())


@dataclass(frozen=True)
class InlineChild:
    """How an inline child starts: its budgets (at most what its parent has left), its
    journal (charging the runs above it), its deadline and what cancels it."""

    budgets: Budgets
    journal: MemoryJournal
    deadline: float | None
    cancel: Callable[[], bool] | None
    clock: Clock


def inline_child(budgets: Budgets, parent: InlineParent | None) -> InlineChild:
    """The start of a child run under `parent` (None: a sub-agent called by hand, a root)."""
    clock: Clock = SYSTEM
    if parent is None:
        journal, cancel = MemoryJournal(), None
    else:
        left = parent.remaining()
        budgets = spawn_budgets(budgets, parent.rules.budgets, parent.rules.spent(), left)
        journal = MemoryJournal(depth=parent.depth + 1, above=(parent, *parent.above))
        cancel, clock = parent.cancelled, parent.clock
    deadline = None if budgets.max_seconds is None else clock.time() + budgets.max_seconds
    return InlineChild(budgets, journal, deadline, cancel, clock)
