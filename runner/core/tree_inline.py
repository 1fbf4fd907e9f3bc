"""Sub-agents in memory: a child run driven inline, inside its parent's tool call.

`run_agent` has no store to park in, so a sub-agent's call runs its child right there, on
an in-memory journal that charges everything the child spends to the runs above it as it
spends it (runner.core.tree), and stops the child when one of them runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.core.clock import SYSTEM, Clock
from runner.core.journal import Charged, MemoryJournal
from runner.core.stop_reasons import StopReason
from runner.core.stop_rules import StopRules
from runner.core.tree import Ancestor, outcome_of, spawn_budgets

if TYPE_CHECKING:
    from runner.core.agent import SubAgent


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


def run_inline(sub: SubAgent, task: Any, parent: InlineParent | None = None) -> str:
    """Run the sub-agent on `task` to its end, here: its answer, or SubAgentStopped."""
    content, is_error = run_child(sub, task, parent)
    if is_error:
        raise SubAgentStopped(content.removeprefix("SubAgentStopped: "))
    return content


def run_child(sub: SubAgent, task: Any, parent: InlineParent | None) -> tuple[str, bool]:
    """Run the sub-agent on `task` inline: the call's observation, (content, is_error)."""
    from runner.core.loop import drive

    if not isinstance(task, str) or not task.strip():
        return f"TypeError: {sub.agent.name or 'the sub-agent'} takes one text argument, task", True
    agent = sub.agent
    clock = SYSTEM if parent is None else parent.clock
    if parent is None:
        budgets, journal, cancel = sub.budgets, MemoryJournal(), None
    else:
        left = parent.remaining()
        budgets = spawn_budgets(sub.budgets, parent.rules.budgets, parent.rules.spent(), left)
        journal = MemoryJournal(depth=parent.depth + 1, above=(parent, *parent.above))
        cancel = parent.cancelled
    deadline = None if budgets.max_seconds is None else clock.time() + budgets.max_seconds
    result = drive(
        agent.model,
        agent.tools,
        task,
        budgets,
        journal,
        deadline=deadline,
        cancel=cancel,
        clock=clock,
        context=agent.context,
    )
    stop = result.stop_reason if isinstance(result.stop_reason, StopReason) else None
    return outcome_of(journal.run_id, stop, result.output, result.error, budgets.as_dict())
