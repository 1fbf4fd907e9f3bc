"""Every budget stop returns what was spent; invalid budgets raise first."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from runner import Budgets, StopReason, run_agent
from tests.unit.scripted_models import TOOLS, Model

# -- budget stops never raise --------------------------------------------------------------

STOPS: list[tuple[str, Callable[[], Any], int]] = [
    ("max_steps", lambda: run_agent(Model(usage=1), TOOLS, "t", max_steps=3), 1),
    ("token_budget", lambda: run_agent(Model(usage=7), TOOLS, "t", max_tokens=20), 7),
    (
        "cost_budget",
        lambda: run_agent(Model(usage={"cost": 1, "tokens": 2}), TOOLS, "t", max_cost=2),
        2,
    ),
    ("time_budget", lambda: run_agent(Model(usage=1), TOOLS, "t", max_seconds=0), 0),
    (
        "repeated_call",
        lambda: run_agent(
            lambda tr: {"type": "tool", "name": "search", "args": {"q": 1}, "usage": 1},
            TOOLS,
            "t",
        ),
        1,
    ),
    ("tool_errors", lambda: run_agent(Model(usage=1), {"search": lambda q: 1 / 0}, "t"), 1),
]


@pytest.mark.parametrize(("reason", "run", "per_step"), STOPS, ids=[s[0] for s in STOPS])
def test_budget_stops_return_what_was_spent(
    reason: str, run: Callable[[], Any], per_step: int
) -> None:
    r = run()  # never raises
    assert r.stop_reason == reason
    assert isinstance(r.stop_reason, StopReason)
    assert r.output is None
    assert r.transcript[0] == {"role": "user", "content": "t"}
    assert r.tokens == per_step * r.steps
    assert r.run_id


# -- invalid budgets -----------------------------------------------------------------------

INVALID = [
    ("max_steps", -1),
    ("max_steps", None),
    ("max_steps", True),
    ("max_steps", 2.0),
    ("max_steps", "8"),
    ("max_tokens", -1),
    ("max_tokens", True),
    ("max_tokens", 1.5),
    ("max_tokens", math.nan),
    ("max_tokens", "10"),
    ("max_consecutive_errors", -1),
    ("max_consecutive_errors", False),
    ("max_consecutive_errors", math.nan),
    ("max_repeats", -2),
    ("max_repeats", True),
    ("max_repeats", "2"),
    ("max_seconds", -0.5),
    ("max_seconds", math.nan),
    ("max_seconds", True),
    ("max_seconds", "1"),
    ("max_cost", -1),
    ("max_cost", math.nan),
    ("max_cost", False),
    ("max_cost", "1"),
    ("model_retries", -1),
    ("model_retries", True),
    ("model_retries", None),
    ("model_retries", 1.0),
    ("retry_backoff", -1),
    ("retry_backoff", math.nan),
    ("retry_backoff", None),
    ("retry_backoff", True),
    ("tool_timeout", 0),
    ("tool_timeout", -1),
    ("tool_timeout", math.nan),
    ("tool_timeout", True),
    ("wrap_up", 1),
    ("wrap_up", "yes"),
    ("wrap_up", None),
]


@pytest.mark.parametrize(("name", "value"), INVALID)
def test_invalid_budgets_raise_before_the_model_is_called(name: str, value: Any) -> None:
    model = Model(final_after=0)
    with pytest.raises(ValueError, match=name):
        run_agent(model, TOOLS, "t", **{name: value})
    assert model.calls == 0
    with pytest.raises(ValueError, match=name):
        Budgets(**{name: value})


def test_a_task_that_is_not_a_string_raises_before_the_model_is_called() -> None:
    model = Model(final_after=0)
    with pytest.raises(ValueError, match="task"):
        run_agent(model, TOOLS, 42)  # type: ignore[arg-type]
    assert model.calls == 0


@pytest.mark.parametrize("value", [0, math.inf])
def test_edge_values_that_are_valid_budgets(value: float) -> None:
    Budgets(max_seconds=value, max_cost=value, retry_backoff=value)
    Budgets(max_tokens=0, max_consecutive_errors=0, max_repeats=0, max_steps=0, model_retries=0)


def test_none_budgets_are_unlimited() -> None:
    r = run_agent(
        Model(usage=10**6), TOOLS, "t", 3, None, None, None, max_seconds=None, max_cost=None
    )
    assert (r.stop_reason, r.steps) == ("max_steps", 3)
