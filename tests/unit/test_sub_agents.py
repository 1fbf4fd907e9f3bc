"""Sub-agents in memory (`Agent.as_tool` under `run_agent`): the child runs inline, its
answer or stop is the observation, and its spend is charged to the runs above it."""

from __future__ import annotations

from typing import Any

import pytest

from runner import Agent, StopReason, run_agent
from runner.core.budgets import Budgets
from runner.core.journal import MemoryJournal
from runner.core.limits import Estimate, estimated, first_call_tokens
from runner.core.loop import drive
from runner.core.tree import Spend, child_run_id, over_budget, spawn_budgets
from runner.testing import FunctionModel, ScriptedModel, call, final, tool_results, turns


def spending(tokens: int, *moves: Any) -> FunctionModel:
    """A model whose every move reports `tokens` of usage: the moves in order, then final."""

    def move(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        n = turns(transcript)
        chosen = dict(moves[n]) if n < len(moves) else final("done")
        chosen["usage"] = tokens
        return chosen

    return FunctionModel(move)


def test_a_sub_agents_answer_is_the_calls_observation() -> None:
    child = Agent(ScriptedModel([final("the child's answer")]), name="researcher")
    model = ScriptedModel([call("research", task="find it"), final("parent done")])
    result = run_agent(model, {"research": child.as_tool(name="research")}, "task")
    assert result.stop_reason == "final"
    assert tool_results(result.transcript)[0]["content"] == "the child's answer"
    assert tool_results(result.transcript)[0]["is_error"] is False
    assert child.model.seen[0] == [{"role": "user", "content": "find it"}]  # type: ignore[attr-defined]


def test_a_sub_agent_that_stops_is_an_error_observation_naming_why() -> None:
    child = Agent(ScriptedModel([call("nope"), call("nope"), call("nope")]), max_steps=2)
    model = ScriptedModel([call("helper", task="t"), final("gave up on it")])
    result = run_agent(model, {"helper": child.as_tool(name="helper")}, "task")
    observed = tool_results(result.transcript)[0]
    assert observed["is_error"] is True
    assert observed["content"].startswith("SubAgentStopped: run ")
    assert "stopped: max_steps" in observed["content"]
    assert result.stop_reason == "final"


def test_a_call_without_a_task_starts_no_child() -> None:
    child = Agent(ScriptedModel([final("never")]))
    model = ScriptedModel([call("helper", topic="x"), final("ok")])
    result = run_agent(model, {"helper": child.as_tool(name="helper")}, "task")
    assert "takes one argument, task" in tool_results(result.transcript)[0]["content"]
    assert child.model.calls == 0  # type: ignore[attr-defined]


def test_the_childs_spend_is_charged_to_the_parent_and_the_tree_stops_on_its_budget() -> None:
    # The child spends 40 a call and would take 10 steps; the parent has 100 tokens.
    child = Agent(spending(40, *[call("noop")] * 10), {"noop": lambda: "ok"}, max_steps=20)
    parent = spending(40, call("helper", task="t"), final("after"))
    result = run_agent(
        parent, {"helper": child.as_tool(name="helper")}, "task", max_tokens=100, max_steps=30
    )
    observed = tool_results(result.transcript)[0]
    # parent 40 + child 40 + 40 = 120 > 100: the child stops after its second call, as the
    # parent does before its next one.
    assert "stopped: token_budget" in observed["content"]
    assert result.stop_reason == "token_budget"


def test_a_child_deeper_than_max_depth_stops_with_max_depth() -> None:
    leaf = Agent(ScriptedModel([final("leaf")]))
    middle = Agent(
        ScriptedModel([call("leaf", task="deeper"), final("middle")]),
        {"leaf": leaf.as_tool(name="leaf")},
    )
    model = ScriptedModel([call("middle", task="go"), final("root")])
    tools = {"middle": middle.as_tool(name="middle", max_depth=1)}
    result = run_agent(model, tools, "task")
    assert result.stop_reason == "final"
    # The leaf (2 deep) stopped with max_depth: the middle saw that as its observation.
    seen = middle.model.seen[-1]  # type: ignore[attr-defined]
    assert "stopped: max_depth" in tool_results(seen)[0]["content"]
    assert leaf.model.calls == 0  # type: ignore[attr-defined]


def test_parallel_children_run_at_once_inline() -> None:
    a = Agent(ScriptedModel([final("A")]))
    b = Agent(ScriptedModel([final("B")]))
    both = {
        "type": "tool",
        "calls": [{"name": "a", "args": {"task": "x"}}, {"name": "b", "args": {"task": "y"}}],
    }
    model = ScriptedModel([both, final("done")])
    result = run_agent(model, {"a": a.as_tool(name="a"), "b": b.as_tool(name="b")}, "task")
    assert sorted(m["content"] for m in tool_results(result.transcript)) == ["A", "B"]


def test_a_sub_agent_tool_is_described_by_its_task_argument() -> None:
    from runner.models import tool_spec

    spec = tool_spec("helper", Agent(ScriptedModel([])).as_tool("helper", "Finds things."))
    assert spec.description == "Finds things."
    assert list(spec.parameters["properties"]) == ["task"]


def test_calling_a_sub_agent_tool_by_hand_runs_it() -> None:
    helper = Agent(ScriptedModel([final("by hand")])).as_tool("helper")
    assert helper("t") == "by hand"


def test_child_ids_are_derived_from_the_call_key() -> None:
    first = child_run_id("01hzyx7k3m4abcde", "01hzyx7k3m4abcde-3")
    assert first == child_run_id("01hzyx7k3m4abcde", "01hzyx7k3m4abcde-3")
    assert first != child_run_id("01hzyx7k3m4abcde", "01hzyx7k3m4abcde-3.1")
    assert first.startswith("01hzyx7k3m") and len(first) == 22


def test_spawn_budgets_are_capped_by_what_the_parent_has_left() -> None:
    parent = Budgets(max_steps=10, max_tokens=1000, max_cost=1.0, max_depth=2)
    child = Budgets(max_steps=8, max_tokens=None, max_cost=None, max_depth=5)
    given = spawn_budgets(child, parent, Spend(steps=4, tokens=700, cost=0.25), 30.0)
    assert (given.max_steps, given.max_tokens, given.max_cost) == (6, 300, 0.75)
    assert (given.max_seconds, given.max_depth) == (30.0, 2)


@pytest.mark.parametrize(
    ("spent", "reason"),
    [
        (Spend(tokens=101), StopReason.TOKEN_BUDGET),
        (Spend(cost=2.0), StopReason.COST_BUDGET),
        (Spend(steps=5), StopReason.MAX_STEPS),
        (Spend(steps=4, tokens=100, cost=1.0), None),
    ],
)
def test_over_budget(spent: Spend, reason: StopReason | None) -> None:
    assert over_budget({"max_tokens": 100, "max_cost": 1.0, "max_steps": 5}, spent) == reason


def test_the_in_memory_store_runs_a_sub_agent_inline_under_the_parents_budget() -> None:
    from runner import Runner
    from runner.testing import InMemoryStore

    child = Agent(spending(30, call("noop"), call("noop")), {"noop": lambda: "ok"})
    parent = Agent(spending(30, call("helper", task="t")), {"helper": child.as_tool("helper")})
    with Runner(store=InMemoryStore()) as runner:
        result = runner.run(parent, "task", id="p", max_tokens=1000, max_steps=20)
        assert runner.store.child_runs("p") == []  # inline: no child run is stored
    assert result.stop_reason == "final"
    assert tool_results(result.transcript)[0]["content"] == "done"
    assert runner.store.deliver_ended() == 0


class _Holding(MemoryJournal):
    """A journal whose model calls hold against a tree (as a durable child's do): the
    estimate each is held at."""

    def __init__(self) -> None:
        super().__init__()
        self.estimates: list[tuple[int, int]] = []

    def hold_tree(self, step: int, estimate: Estimate) -> None:
        self.estimates.append((step, estimated(estimate)))


@pytest.mark.parametrize("max_tokens", [None, 20])
def test_a_parent_tells_its_childs_first_estimate_as_the_childs_loop_makes_it(
    max_tokens: int | None,
) -> None:
    """What a parent's park may hold for its child's first model call (first_call_tokens) is
    what the child's own loop estimates that call at: no more, no less."""
    model = ScriptedModel([final("done")])
    model.max_tokens = max_tokens  # type: ignore[attr-defined]
    child = Agent(model, name="child")
    journal = _Holding()
    drive(child.model, child.tools, "a task of some length", child.budgets, journal)
    assert journal.estimates == [(1, first_call_tokens(child, "a task of some length"))]


def test_a_parent_cannot_tell_the_first_estimate_of_a_child_with_a_context() -> None:
    child = Agent(ScriptedModel([final("done")]), context=lambda transcript: transcript[-1:])
    assert first_call_tokens(child, "task") is None
