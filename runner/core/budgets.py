"""A run's budgets: every limit it runs under, checked when they are made. The stop each
limit produces is `runner.core.stop_reasons`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from runner.defaults import DEFAULT_MODEL_TIMEOUT, LONGEST_SECONDS


@dataclass(frozen=True)
class Budgets:
    """Every limit of a run. `None` means unlimited where a limit is optional."""

    max_steps: int = 8
    max_tokens: int | None = 10_000
    max_consecutive_errors: int | None = 2
    max_repeats: int | None = 2
    max_seconds: float | None = None
    max_cost: float | None = None
    model_retries: int = 2
    retry_backoff: float = 0.5
    tool_timeout: float | None = None
    # Seconds one model call may take in all before it is given up (and retried like any
    # failure): a model that never answers cannot hold a run forever. None: no limit.
    model_timeout: float | None = DEFAULT_MODEL_TIMEOUT
    wrap_up: bool = False
    # Seconds a call may wait for a person's answer; then it is denied, saying so. Waiting
    # time never counts against max_seconds, which measures the run's active time.
    approval_timeout: float | None = None
    # How many calls of one step run at once (a model may ask for several); 1 runs them in
    # order. Not a budget that stops a run: a cap on the step's threads.
    max_parallel_tools: int = 8
    # How deep sub-agents nest below the run that started the tree (a child is 1 deep); a
    # child deeper than its parent's max_depth stops at once with `max_depth`.
    max_depth: int | None = 3

    def __post_init__(self) -> None:
        _check_int("max_steps", self.max_steps, allow_none=False)
        _check_int("max_tokens", self.max_tokens)
        _check_int("max_consecutive_errors", self.max_consecutive_errors)
        _check_int("max_repeats", self.max_repeats)
        _check_int("model_retries", self.model_retries, allow_none=False)
        _check_number("max_seconds", self.max_seconds)
        _check_number("max_cost", self.max_cost)
        _check_number("retry_backoff", self.retry_backoff, allow_none=False)
        _check_number("tool_timeout", self.tool_timeout, positive=True)
        _check_number("model_timeout", self.model_timeout, positive=True, most=LONGEST_SECONDS)
        # A wait's expiry is a timestamp: a timeout past year 9999 cannot be one.
        _check_number(
            "approval_timeout", self.approval_timeout, positive=True, most=LONGEST_SECONDS
        )
        _check_int("max_parallel_tools", self.max_parallel_tools, allow_none=False)
        _check_int("max_depth", self.max_depth)
        if self.max_parallel_tools < 1:
            raise ValueError(f"max_parallel_tools must be 1 or more, got {self.max_parallel_tools}")
        if not isinstance(self.wrap_up, bool):
            raise ValueError(f"wrap_up must be True or False, not {self.wrap_up!r}")

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _check_int(name: str, value: object, *, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")


def _check_number(
    name: str,
    value: object,
    *,
    allow_none: bool = True,
    positive: bool = False,
    most: float | None = None,
) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if math.isnan(value) or value < 0 or (positive and value == 0):
        bound = "greater than zero" if positive else "zero or more"
        raise ValueError(f"{name} must be {bound}, got {value}")
    if most is not None and not value <= most:
        raise ValueError(f"{name} must be at most {most:g} seconds (about 31 years), got {value}")
