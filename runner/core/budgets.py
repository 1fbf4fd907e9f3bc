"""Stop reasons and the limits that produce them: one enum, one place."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class StopReason(StrEnum):
    """Why a run stopped. Compares equal to the plain strings of seed 000."""

    FINAL = "final"  # the model gave its answer
    MAX_STEPS = "max_steps"  # the step cap was reached (or the scripted moves ran out)
    TOKEN_BUDGET = "token_budget"  # the tokens spent went over max_tokens
    REPEATED_CALL = "repeated_call"  # same tool, same args, more than max_repeats times
    TOOL_ERRORS = "tool_errors"  # more than max_consecutive_errors failed steps in a row
    TIME_BUDGET = "time_budget"  # the wall-clock deadline passed
    COST_BUDGET = "cost_budget"  # the cost spent went over max_cost
    CANCELLED = "cancelled"  # somebody asked the run to stop
    MODEL_ERROR = "model_error"  # the model kept raising after its retries
    CRASH_LOOP = "crash_loop"  # taken over too many times in a row without progress

    @property
    def meaning(self) -> str:
        """What this stop means, in words for a person."""
        return _MEANINGS[self][0]

    @property
    def budget(self) -> str | None:
        """The budget whose limit this stop names (shown with its value), if any."""
        return _MEANINGS[self][1]

    def explained(self, budgets: Mapping[str, Any], error: str | None = None) -> str:
        """The meaning, with the limit that was reached: `... (max_steps=8)`.

        A `model_error` is worded by its `error`: a failure the loop never retried (a bad
        key, a context function that raised) does not read as one that outlived retries.
        """
        if self is StopReason.MODEL_ERROR:
            return _model_error_meaning(budgets, error)
        limit = None if self.budget is None else budgets.get(self.budget)
        return self.meaning if limit is None else f"{self.meaning} ({self.budget}={limit})"


_MEANINGS: dict[StopReason, tuple[str, str | None]] = {
    StopReason.FINAL: ("answered", None),
    StopReason.MAX_STEPS: ("gave up: the step cap was reached", "max_steps"),
    StopReason.TOKEN_BUDGET: ("gave up: the tokens spent went over the budget", "max_tokens"),
    StopReason.COST_BUDGET: ("gave up: the cost spent went over the budget", "max_cost"),
    StopReason.TIME_BUDGET: ("gave up: the wall-clock budget ran out", "max_seconds"),
    StopReason.REPEATED_CALL: (
        "looped: the same tool call, same arguments, too many times",
        "max_repeats",
    ),
    StopReason.TOOL_ERRORS: ("too many failed steps in a row", "max_consecutive_errors"),
    StopReason.CANCELLED: ("cancelled on request", None),
    StopReason.MODEL_ERROR: ("the model kept failing after its retries", None),
    StopReason.CRASH_LOOP: (
        "given up: taken over too many times in a row without progress",
        None,
    ),
}


# How the loop's error text begins when it stopped without retrying (ask_model in model_call.py):
# the model raised ModelFatal, or the context function raised (the same transcript would
# fail the same way again).
_NEVER_RETRIED = ("ModelFatal:", "context:")


def _model_error_meaning(budgets: Mapping[str, Any], error: str | None) -> str:
    if error is not None and error.startswith(_NEVER_RETRIED):
        return "the model failed with an error no retry can fix (not retried)"
    retries = budgets.get("model_retries")
    if retries == 0:
        return "the model failed, and no retry was allowed (model_retries=0)"
    meaning = _MEANINGS[StopReason.MODEL_ERROR][0]
    return meaning if retries is None else f"{meaning} (model_retries={retries})"


# The budgets a wrap-up call may soften: the run is out of room, not misbehaving.
WRAP_UP_REASONS = frozenset(
    {StopReason.MAX_STEPS, StopReason.TOKEN_BUDGET, StopReason.COST_BUDGET, StopReason.TIME_BUDGET}
)


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
    wrap_up: bool = False
    # Seconds a call may wait for a person's answer; then it is denied, saying so. Waiting
    # time never counts against max_seconds, which measures the run's active time.
    approval_timeout: float | None = None
    # How many calls of one step run at once (a model may ask for several); 1 runs them in
    # order. Not a budget that stops a run: a cap on the step's threads.
    max_parallel_tools: int = 8

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
        _check_number("approval_timeout", self.approval_timeout, positive=True)
        _check_int("max_parallel_tools", self.max_parallel_tools, allow_none=False)
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
    name: str, value: object, *, allow_none: bool = True, positive: bool = False
) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if math.isnan(value) or value < 0 or (positive and value == 0):
        bound = "greater than zero" if positive else "zero or more"
        raise ValueError(f"{name} must be {bound}, got {value}")
