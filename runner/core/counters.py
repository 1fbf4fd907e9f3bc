"""A run's running totals: what every journal entry carries, and what the stop rules and a
tree's budgets read. A leaf of the step machine: it imports nothing of runner but the
quicker `__init__` of its frozen dataclasses (`frozen`)."""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.frozen import quick_init


@quick_init  # one or two a step
@dataclass(frozen=True, slots=True)
class Counters:
    """A run's running totals, stored with every entry."""

    steps: int = 0
    tokens: int = 0
    cost: float = 0.0
    error_streak: int = 0
