"""A run's running totals: what every journal entry carries, and what the stop rules and a
tree's budgets read. A leaf of the step machine: it imports nothing of runner."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Counters:
    """A run's running totals, stored with every entry."""

    steps: int = 0
    tokens: int = 0
    cost: float = 0.0
    error_streak: int = 0
