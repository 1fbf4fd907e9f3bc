"""Trees of runs: sub-agents as child runs, and the one budget a tree spends.

A tool made by `Agent.as_tool` starts a child run when the model calls it. In a durable run
the call is journaled as a `wait` for the child (`Asks.CHILD`), the child run is created in
that same commit with an id derived from the call's key (`child_run_id`: a crash anywhere
re-attaches to the same child, never starts another), and the parent parks; the child's end
is delivered as the wait's `answer` (`Answer.ENDED`), whose text is the call's observation
(`outcome_of`). In memory (`run_agent`) the child runs inline, inside the call.

Spend travels up as it is spent: every entry a run writes charges what it added (steps,
tokens, cost) to each of its ancestors' `below` counters (in a durable run, in the same
transaction as the entry). Before each model call a run checks its own budgets against its
own spend plus what was charged below it, and each ancestor's budgets against the
ancestor's (`over_budget`). In a durable run a child's model call also reserves a step and
its estimate of tokens from every ancestor's budget first (runner.sql.tree_budget): no
call starts once an ancestor's spend and the calls in flight below it leave no room
(`crowded`), so concurrent children go over an ancestor's budget only by the last call that
found room and the estimation error of those in flight beside it. A child's budgets are at
most what its parent has left (`spawn_budgets`).

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.core.tree_inline`, `runner.sql.children` (with `runner.sql.parking`, a park with its
first child, and `runner.sql.take_back`, a parent answered and claimed back),
`runner.store.run_trees`, `runner.service.tree_events`, `runner.cli.tree_output`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.ids import ID_ALPHABET
from runner.core.stop_reasons import StopReason


def child_run_id(parent_id: str, call_key: str) -> str:
    """The id of the child run that the call `call_key` of run `parent_id` starts: the same
    on every resume (a crash re-attaches to it), sorted beside its parent (the parent's
    time-ordered head), 22 characters (never a submitted run's 16)."""
    import hashlib  # here: a command that only reads runs never loads it

    digest = int.from_bytes(hashlib.sha256(call_key.encode()).digest()[:8], "big")
    tail = "".join(ID_ALPHABET[(digest >> shift) & 31] for shift in range(55, -1, -5))
    return parent_id[:10] + tail


@dataclass(frozen=True)
class Spend:
    """What a run, or the runs below it, spent: steps, tokens, cost."""

    steps: int = 0
    tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.steps + other.steps, self.tokens + other.tokens, self.cost + other.cost)

    def __bool__(self) -> bool:
        return bool(self.steps or self.tokens or self.cost)

    @classmethod
    def of(cls, counters: Counters) -> Spend:
        return cls(counters.steps, counters.tokens, counters.cost)

    @classmethod
    def added(cls, before: Counters, after: Counters) -> Spend:
        """What an entry with counters `after` charged, the run's last being `before`."""
        return cls(
            max(after.steps - before.steps, 0),
            max(after.tokens - before.tokens, 0),
            max(after.cost - before.cost, 0.0),
        )


@dataclass(frozen=True)
class Place:
    """Where a run stands in its tree: how deep below its root, and what the runs below it
    have spent so far (charged to it)."""

    depth: int = 0
    below: Spend = field(default_factory=Spend)


@dataclass(frozen=True)
class Ancestor:
    """An ancestor's budgets and what it and its runs below spent: what a run checks before
    each model call (its root's budget is the tree's)."""

    run_id: str
    budgets: Mapping[str, Any]
    spent: Spend
    cancelled: bool = False


@dataclass(frozen=True)
class TreeStop:
    """Why a run must stop for its tree: the reason and, in words, whose budget it was."""

    reason: StopReason
    error: str


class Charged(Protocol):
    """A run above an inline child (runner.core.tree_inline): it is charged what the child
    spends, and tells what it and its runs below spent against its budgets."""

    def charge(self, spent: Spend) -> None: ...

    def ancestor(self) -> Ancestor: ...


def over_budget(budgets: Mapping[str, Any], spent: Spend) -> StopReason | None:
    """The budget `spent` leaves no room in, if any: tokens or cost spent beyond the limit
    (the same rule as a run's own), or every step of the limit taken."""
    max_tokens = budgets.get("max_tokens")
    if max_tokens is not None and spent.tokens > max_tokens:
        return StopReason.TOKEN_BUDGET
    max_cost = budgets.get("max_cost")
    if max_cost is not None and spent.cost > max_cost:
        return StopReason.COST_BUDGET
    max_steps = budgets.get("max_steps")
    if max_steps is not None and spent.steps >= max_steps:
        return StopReason.MAX_STEPS
    return None


def ancestors_stop(ancestors: tuple[Ancestor, ...] | list[Ancestor]) -> TreeStop | None:
    """The first ancestor (nearest first) that was cancelled or whose budget is spent."""
    for ancestor in ancestors:
        if ancestor.cancelled:
            return TreeStop(StopReason.CANCELLED, f"run {ancestor.run_id} above was cancelled")
        reason = over_budget(ancestor.budgets, ancestor.spent)
        if reason is not None:
            limit = reason.budget
            value = ancestor.budgets.get(limit) if limit else None
            return TreeStop(
                reason,
                f"the tree's budget is spent: run {ancestor.run_id} above ({limit}={value})",
            )
    return None


def crowded(ancestors: Sequence[Ancestor], held: Mapping[str, Spend]) -> Ancestor | None:
    """The first ancestor (nearest first) whose budget its spend and the calls in flight
    below it (`held`, by ancestor: a step and an estimate of tokens a call) leave no room
    in, by the same rule as spend alone: a call starts only while they do not."""
    for ancestor in ancestors:
        if over_budget(ancestor.budgets, ancestor.spent + held.get(ancestor.run_id, Spend())):
            return ancestor
    return None


class TreeStopped(Exception):
    """A run's model call found its tree's budget spent (or a run above cancelled) when it
    went to reserve: the run stops for it before calling."""

    def __init__(self, stop: TreeStop) -> None:
        super().__init__(stop.error)
        self.stop = stop


def spawn_budgets(
    child: Budgets, parent: Budgets, spent: Spend, deadline_left: float | None
) -> Budgets:
    """A child's budgets: its own, capped by what its parent has left (`spent` is the
    parent's own spend plus its runs' below), the parent's max_depth and deadline."""
    fields = child.as_dict()

    def capped(name: str, left: Any) -> None:
        if left is None:
            return
        mine = fields[name]
        fields[name] = left if mine is None else min(mine, left)

    capped("max_steps", max(parent.max_steps - spent.steps, 0))
    if parent.max_tokens is not None:
        capped("max_tokens", max(parent.max_tokens - spent.tokens, 0))
    if parent.max_cost is not None:
        capped("max_cost", max(parent.max_cost - spent.cost, 0.0))
    if deadline_left is not None:
        capped("max_seconds", max(deadline_left, 0.001))
    capped("max_depth", parent.max_depth)
    return Budgets(**fields)


@dataclass(frozen=True)
class ChildRun:
    """A child run to create with its parent's wait: what the store writes as its row."""

    id: str
    parent_id: str
    call_key: str
    agent: str | None  # the child agent's reference, for any worker to load it
    agent_name: str | None
    release: str | None
    task: str
    budgets: dict[str, Any]
    # The estimate of tokens of the child's first model call, if its parent can tell
    # (runner.core.limits.first_call_tokens): a store may hold it against the tree's
    # budgets in the parent's park (runner.sql.tree_budget.hold_ahead), a commit fewer a
    # sub-agent.
    first_tokens: int | None = None

    @classmethod
    def started(
        cls,
        parent_id: str,
        call_key: str,
        agent: Any,
        task: str,
        budgets: Budgets,
        first_tokens: int | None = None,
    ) -> ChildRun:
        """The child run that the parent's call `call_key` starts with `agent`: its id
        derived from the key, so a crash re-attaches to it. `first_tokens`: the estimate of
        its first model call (runner.core.limits.first_call_tokens)."""
        return cls(
            id=child_run_id(parent_id, call_key),
            parent_id=parent_id,
            call_key=call_key,
            agent=agent.reference(),
            agent_name=agent.name,
            release=agent.release,
            task=task,
            budgets=budgets.as_dict(),
            first_tokens=first_tokens,
        )


def outcome_of(
    run_id: str,
    stop_reason: StopReason | None,
    output: Any,
    error: str | None,
    budgets: Mapping[str, Any],
) -> tuple[str, bool]:
    """A child's end as its parent's observation: (content, is_error). Its answer if it
    gave one, else why it stopped (the parent's model reads it and decides)."""
    if stop_reason is StopReason.FINAL:
        return ("" if output is None else output if isinstance(output, str) else str(output)), False
    reason = stop_reason or StopReason.CANCELLED
    words = f"SubAgentStopped: run {run_id} stopped: {reason} ({reason.explained(budgets, error)})"
    if error:
        words += f": {error}"
    if output is not None:
        words += f". Its last answer: {output}"
    return words, True
