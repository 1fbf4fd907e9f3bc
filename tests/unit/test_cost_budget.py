"""The cost budget and usage mappings."""

from __future__ import annotations

import pytest

from runner import run_agent
from tests.unit.scripted_models import TOOLS, Model, pairs


def test_cost_budget_stops_one_over() -> None:
    model = Model(usage={"tokens": 10, "cost": 0.4})
    r = run_agent(model, TOOLS, "t", max_cost=1.0)
    assert (r.stop_reason, r.output, r.steps) == ("cost_budget", None, 3)
    assert r.cost == pytest.approx(1.2)
    assert r.tokens == 30
    assert pairs(r.transcript) == 2  # the third action broke the budget and is not shown


def test_cost_exactly_at_the_budget_continues() -> None:
    r = run_agent(Model(usage={"cost": 0.25}), TOOLS, "t", max_steps=4, max_cost=1.0)
    assert (r.stop_reason, r.steps, r.cost) == ("max_steps", 4, 1.0)
    r = run_agent(Model(usage={"cost": 0.25}), TOOLS, "t", max_steps=5, max_cost=1.0)
    assert (r.stop_reason, r.steps, r.cost) == ("cost_budget", 5, 1.25)


def test_zero_cost_budget() -> None:
    r = run_agent(Model(usage={"cost": 0}, final_after=1), TOOLS, "t", max_cost=0)
    assert r.stop_reason == "final"
    r = run_agent(Model(usage={"cost": 0.01}, final_after=1), TOOLS, "t", max_cost=0)
    assert (r.stop_reason, r.steps) == ("cost_budget", 1)


def test_cost_without_max_cost_is_only_counted() -> None:
    r = run_agent(Model(usage={"cost": 5.0}), TOOLS, "t", max_steps=3)
    assert (r.stop_reason, r.cost) == ("max_steps", 15.0)


def test_tokens_are_checked_before_cost() -> None:
    model = Model(usage={"tokens": 11, "cost": 2.0})
    r = run_agent(model, TOOLS, "t", max_tokens=10, max_cost=1.0)
    assert (r.stop_reason, r.steps) == ("token_budget", 1)


def test_usage_mapping_tokens_count_against_max_tokens() -> None:
    r = run_agent(Model(usage={"tokens": 4000}), TOOLS, "t")
    assert (r.stop_reason, r.steps, r.tokens) == ("token_budget", 3, 12_000)


def test_input_and_output_tokens_are_added() -> None:
    usage = {"input_tokens": 3000, "output_tokens": 2000}
    r = run_agent(Model(usage=usage), TOOLS, "t")
    assert (r.stop_reason, r.steps, r.tokens) == ("token_budget", 3, 15_000)
    r = run_agent(Model(usage={"input_tokens": 7}), TOOLS, "t", max_steps=2)
    assert r.tokens == 14
    r = run_agent(Model(usage={"output_tokens": 7}), TOOLS, "t", max_steps=2)
    assert r.tokens == 14


def test_a_tokens_key_wins_over_input_and_output_tokens() -> None:
    usage = {"tokens": 1, "input_tokens": 100, "output_tokens": 100}
    r = run_agent(Model(usage=usage), TOOLS, "t", max_steps=2)
    assert r.tokens == 2
