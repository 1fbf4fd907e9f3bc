"""The stop rules and the running counts they read: when a run must stop, and why.

A step is charged (`count`), then judged before its tools run (`before_tools`: tokens, cost,
final, repeats, in seed 000's order) and after its outcome is recorded (`after_tools`: the
error streak, the step cap). The budgets are those the step runs under: a recorded revival
or extension changes them from the step after it (`change`).
"""

from __future__ import annotations

import threading
from collections import Counter

from runner.core.actions import Action, ActionKind
from runner.core.budget_changes import applied
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, Stop
from runner.core.stop_reasons import WRAP_UP_REASONS, StopReason
from runner.core.tree import Spend, TreeStop, over_budget


class StopRules:
    """A run's budgets, its counters, the calls it made, and the rules that read them."""

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self.counters = Counters()
        self.calls: Counter[tuple[str, str]] = Counter()  # each call's signature, for repeats
        # What the run's sub-agents (child runs, and theirs) spent, charged to this run as
        # they spend it: its budgets cover it too (runner.core.tree).
        self.below = Spend()
        self._charging = threading.Lock()

    def charge(self, spent: Spend) -> None:
        """Add what a run below this one just spent (from the child's thread)."""
        with self._charging:
            self.below = self.below + spent

    def spent(self) -> Spend:
        """What this run and the runs below it spent."""
        return Spend.of(self.counters) + self.below

    def tree_stop(self) -> TreeStop | None:
        """Before a model call: the budget this run and its sub-agents spent together, if
        it is spent (only while sub-agents spent something: a run alone is judged by the
        rules below, exactly as seed 000 orders them)."""
        if not self.below:
            return None
        reason = over_budget(self.budgets.as_dict(), self.spent())
        if reason is None:
            return None
        return TreeStop(reason, "its budget is spent, with what its sub-agents spent")

    def change(self, entry: Entry) -> None:
        """A recorded revival or extension: the steps after it run under its budgets."""
        self.budgets = applied(self.budgets, entry)

    def count(self, step: int, action: Action) -> None:
        """Charge the step and its usage, and count each call's signature for repeats."""
        c = self.counters
        self.counters = Counters(
            steps=step,
            tokens=c.tokens + action.tokens,
            cost=c.cost + action.cost,
            error_streak=c.error_streak,
        )
        if action.calls:
            self.calls.update(action.signatures)
        elif action.signature is not None:  # the common case, without a list
            self.calls[action.signature] += 1

    def spent_out(self) -> StopReason | None:
        """The token or cost budget spent past (by this run and the runs below it), if one
        is: checked after a spend that is no step (a summary of older steps)."""
        b, spent = self.budgets, self.spent()
        if b.max_tokens is not None and spent.tokens > b.max_tokens:
            return StopReason.TOKEN_BUDGET
        if b.max_cost is not None and spent.cost > b.max_cost:
            return StopReason.COST_BUDGET
        return None

    def before_tools(self, action: Action) -> StopReason | None:
        """The stop rules before a tool runs, in seed 000's order."""
        b, c = self.budgets, self.counters
        below = self.below
        if b.max_tokens is not None and c.tokens + below.tokens > b.max_tokens:
            return StopReason.TOKEN_BUDGET
        if b.max_cost is not None and c.cost + below.cost > b.max_cost:
            return StopReason.COST_BUDGET
        if action.kind is ActionKind.FINAL:
            return StopReason.FINAL
        if b.max_repeats is None:
            return None
        if action.calls:
            repeated = any(self.calls[s] > b.max_repeats for s in action.signatures)
            return StopReason.REPEATED_CALL if repeated else None
        signature = action.signature
        if signature is None:
            return None
        return StopReason.REPEATED_CALL if self.calls[signature] > b.max_repeats else None

    def after_tools(self, observed: Entry) -> StopReason | None:
        """The stop rules once a step's outcome is recorded: the error streak, the step cap."""
        limit = self.budgets.max_consecutive_errors
        if limit is not None and observed.counters.error_streak > limit:
            return StopReason.TOOL_ERRORS
        if observed.step == self.budgets.max_steps:
            return StopReason.MAX_STEPS
        if self.below.steps and observed.step + self.below.steps >= self.budgets.max_steps:
            return StopReason.MAX_STEPS  # the steps its sub-agents took count too
        return None

    def wraps_up(self, reason: StopReason | None) -> bool:
        """Whether a stop for `reason` gets one last model call first (a wrap-up)."""
        return self.budgets.wrap_up and reason in WRAP_UP_REASONS

    def stop_with(self, reason: StopReason | None) -> Stop | None:
        """The stop to record with the step's last entry (none if a wrap-up comes first)."""
        if reason is None or self.wraps_up(reason):
            return None
        return Stop(reason)
