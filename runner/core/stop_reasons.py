"""Why a run stopped: the stop reasons, what each means in words, and which a wrap-up may
soften. One enum, one place; the limits that produce them are `runner.core.budgets`."""

from __future__ import annotations

from collections.abc import Mapping
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
    # A sub-agent (a child run) nested deeper below its root than max_depth: it never runs.
    MAX_DEPTH = "max_depth"
    # A resume found the run's listed tools (an MCP server's) not as they were listed when
    # it started: going on would show the model, or call, other tools than it chose from.
    TOOLS_CHANGED = "tools_changed"
    # A framework's agent (Pydantic AI, the Agents SDK), replayed on resume, asked for what
    # its journal does not hold at that place: its code or its inputs changed.
    DIVERGED = "diverged"

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
    StopReason.MAX_DEPTH: (
        "not run: a sub-agent nested deeper below its root than allowed",
        "max_depth",
    ),
    StopReason.TOOLS_CHANGED: (
        "stopped: its tools' server lists them differently since the run started",
        None,
    ),
    StopReason.DIVERGED: (
        "stopped: on resume the agent's code asked for what its journal does not hold",
        None,
    ),
}


# How the loop's error text begins when it stopped without retrying (ModelCall.ask in
# core/model_call.py): the model raised ModelFatal, or the context function raised (the
# same transcript would fail the same way again).
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
