"""Malformed model output is an observation the model can recover from, never a crash."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import pytest

from runner import run_agent

Transcript = list[dict[str, Any]]


class Unprintable:
    def __repr__(self) -> str:
        return "<Unprintable>"


BAD_OUTPUTS: list[tuple[str, Any, str]] = [
    ("string", "the answer is 5", "must be a dict"),
    ("none", None, "must be a dict"),
    ("int", 42, "must be a dict"),
    ("list", [{"type": "final", "content": "x"}], "must be a dict"),
    ("missing type", {"name": "search", "args": {"q": 1}}, "'type'"),
    ("unknown type", {"type": "answer", "content": "x"}, "'type'"),
    ("type not a string", {"type": ["final"], "content": "x"}, "'type'"),
    ("name not a string", {"type": "tool", "name": 5, "args": {}}, "'name'"),
    ("name missing", {"type": "tool", "args": {"q": 1}}, "'name'"),
    ("name none", {"type": "tool", "name": None, "args": {}}, "'name'"),
    ("args a list", {"type": "tool", "name": "search", "args": [1, 2]}, "'args'"),
    ("args a string", {"type": "tool", "name": "search", "args": "q=1"}, "'args'"),
    ("args none", {"type": "tool", "name": "search", "args": None}, "'args'"),
    ("args key not a string", {"type": "tool", "name": "search", "args": {1: 2}}, "'args'"),
    ("args hold a set", {"type": "tool", "name": "search", "args": {"q": {1, 2}}}, "JSON"),
    (
        "args hold an object",
        {"type": "tool", "name": "search", "args": {"q": Unprintable()}},
        "JSON",
    ),
    ("args hold nan", {"type": "tool", "name": "search", "args": {"q": math.nan}}, "JSON"),
    ("args hold inf", {"type": "tool", "name": "search", "args": {"q": math.inf}}, "JSON"),
    (
        "args hold -inf deep",
        {"type": "tool", "name": "search", "args": {"q": [{"x": -math.inf}]}},
        "JSON",
    ),
    ("args hold bytes", {"type": "tool", "name": "search", "args": {"q": b"x"}}, "JSON"),
    ("final without content", {"type": "final"}, "'content'"),
    ("usage negative", {"type": "final", "content": "x", "usage": -1}, "usage"),
    ("usage a string", {"type": "final", "content": "x", "usage": "10"}, "usage"),
    ("usage a bool", {"type": "final", "content": "x", "usage": True}, "usage"),
    ("usage nan", {"type": "final", "content": "x", "usage": math.nan}, "usage"),
    ("usage inf", {"type": "final", "content": "x", "usage": math.inf}, "usage"),
    ("usage a list", {"type": "final", "content": "x", "usage": [1]}, "usage"),
    ("usage tokens negative", {"type": "final", "content": "x", "usage": {"tokens": -5}}, "usage"),
    ("usage tokens a string", {"type": "final", "content": "x", "usage": {"tokens": "5"}}, "usage"),
    ("usage cost nan", {"type": "final", "content": "x", "usage": {"cost": math.nan}}, "usage"),
    ("usage cost negative", {"type": "final", "content": "x", "usage": {"cost": -0.1}}, "usage"),
    ("usage cost huge int", {"type": "final", "content": "x", "usage": {"cost": 10**400}}, "usage"),
    ("usage input bad", {"type": "final", "content": "x", "usage": {"input_tokens": "3"}}, "usage"),
    (
        "usage output bad",
        {"type": "final", "content": "x", "usage": {"output_tokens": -3}},
        "usage",
    ),
]
IDS = [name for name, _, _ in BAD_OUTPUTS]


def search(q: object) -> str:
    return f"results for {q}"


class RecoversFrom:
    """Gives `bad` until it has seen an error observation, then answers with what it read."""

    def __init__(self, bad: Any, times: int = 1) -> None:
        self.bad = bad
        self.times = times
        self.calls = 0

    def __call__(self, tr: Transcript) -> Any:
        self.calls += 1
        if self.calls <= self.times:
            return self.bad
        return {"type": "final", "content": tr[-1]["content"]}


@pytest.mark.parametrize(("name", "bad", "hint"), BAD_OUTPUTS, ids=IDS)
def test_bad_output_is_an_error_observation_the_model_recovers_from(
    name: str, bad: Any, hint: str
) -> None:
    model = RecoversFrom(bad)
    r = run_agent(model, {"search": search}, "t")
    assert (r.stop_reason, r.steps) == ("final", 2)
    assert len(r.transcript) == 4
    action, observation = r.transcript[1], r.transcript[2]
    assert action["role"] == "assistant"
    assert "content" not in action  # never mistaken for an answer
    assert observation["role"] == "tool"
    assert observation["is_error"] is True
    assert observation["content"].startswith("InvalidAction: ")
    assert hint in observation["content"]
    # What the model read is what it answered with.
    assert r.output == observation["content"]


@pytest.mark.parametrize(("name", "bad", "hint"), BAD_OUTPUTS, ids=IDS)
def test_three_bad_outputs_in_a_row_are_tool_errors(name: str, bad: Any, hint: str) -> None:
    model = RecoversFrom(bad, times=10)
    r = run_agent(model, {"search": search}, "t")
    assert (r.stop_reason, r.output, r.steps) == ("tool_errors", None, 3)
    assert model.calls == 3
    observations = [m for m in r.transcript if m["role"] == "tool"]
    assert len(observations) == 3
    assert all(m["is_error"] for m in observations)


@pytest.mark.parametrize(("name", "bad", "hint"), BAD_OUTPUTS, ids=IDS)
def test_a_bad_output_with_no_error_budget_stops_at_once(name: str, bad: Any, hint: str) -> None:
    r = run_agent(RecoversFrom(bad, times=10), {"search": search}, "t", max_consecutive_errors=0)
    assert (r.stop_reason, r.steps) == ("tool_errors", 1)


def test_a_repeated_bad_output_is_not_a_repeated_call() -> None:
    bad = {"type": "tool", "name": "search", "args": [1]}
    r = run_agent(
        RecoversFrom(bad, times=10),
        {"search": search},
        "t",
        max_repeats=0,
        max_consecutive_errors=None,
        max_steps=4,
    )
    assert (r.stop_reason, r.steps) == ("max_steps", 4)


def test_bad_outputs_and_tool_exceptions_share_one_streak() -> None:
    outputs = [
        {"type": "tool", "name": "search", "args": "oops"},
        {"type": "tool", "name": "div", "args": {"a": 1, "b": 0}},
        "not even a dict",
    ]
    calls = 0

    def model(tr: Transcript) -> Any:
        nonlocal calls
        calls += 1
        return outputs[calls - 1]

    r = run_agent(model, {"search": search, "div": lambda a, b: a / b}, "t")
    assert (r.stop_reason, r.steps) == ("tool_errors", 3)


def test_a_good_step_resets_the_streak_after_bad_outputs() -> None:
    outputs: list[Any] = [
        "bad",
        "bad",
        {"type": "tool", "name": "search", "args": {"q": 1}},
        "bad",
        "bad",
        {"type": "final", "content": "made it"},
    ]
    calls = 0

    def model(tr: Transcript) -> Any:
        nonlocal calls
        calls += 1
        return outputs[calls - 1]

    r = run_agent(model, {"search": search}, "t")
    assert (r.stop_reason, r.output, r.steps) == ("final", "made it", 6)


def test_the_bad_output_is_shown_to_the_model_as_it_was() -> None:
    r = run_agent(RecoversFrom(["not", "a", "dict"]), {}, "t")
    assert r.transcript[1] == {"role": "assistant", "invalid": "['not', 'a', 'dict']"}


def test_a_huge_bad_output_is_shortened() -> None:
    r = run_agent(RecoversFrom("x" * 10_000), {}, "t")
    shown = r.transcript[1]["invalid"]
    assert shown.startswith("'xxx")
    assert shown.endswith("...")
    assert len(shown) <= 600


def test_a_bad_tool_call_never_runs_the_tool() -> None:
    ran: list[object] = []

    def logged(q: object) -> str:
        ran.append(q)
        return "r"

    bad = {"type": "tool", "name": "search", "args": {"q": {1, 2}}}
    run_agent(RecoversFrom(bad), {"search": logged}, "t")
    assert ran == []


def test_usage_of_a_bad_output_still_counts() -> None:
    bad = {"type": "bogus", "usage": 6}
    r = run_agent(RecoversFrom(bad, times=10), {}, "t", max_tokens=10)
    assert (r.stop_reason, r.steps, r.tokens) == ("token_budget", 2, 12)


def test_bad_usage_costs_nothing() -> None:
    bad = {"type": "final", "content": "x", "usage": -100}
    r = run_agent(RecoversFrom(bad), {}, "t")
    assert (r.stop_reason, r.tokens) == ("final", 0)


def test_any_mapping_is_a_fine_output() -> None:
    good = MappingProxyType({"type": "final", "content": "ok", "usage": 1})
    r = run_agent(lambda tr: good, {}, "t")
    assert (r.stop_reason, r.output, r.tokens) == ("final", "ok", 1)


def test_tool_args_in_any_mapping_are_fine() -> None:
    def model(tr: Transcript) -> Any:
        if len(tr) == 1:
            return {"type": "tool", "name": "search", "args": MappingProxyType({"q": 1})}
        return {"type": "final", "content": tr[-1]["content"]}

    r = run_agent(model, {"search": search}, "t")
    assert r.output == "results for 1"
    assert r.transcript[1] == {"role": "assistant", "tool": "search", "args": {"q": 1}}


def test_extra_keys_in_an_output_are_ignored() -> None:
    r = run_agent(lambda tr: {"type": "final", "content": "ok", "thoughts": "hmm"}, {}, "t")
    assert (r.stop_reason, r.output) == ("final", "ok")


@pytest.mark.parametrize("usage", [None, 0, 0.0, {}, {"tokens": 0}, {"cost": 0}])
def test_empty_usage_is_zero(usage: Any) -> None:
    r = run_agent(lambda tr: {"type": "final", "content": "ok", "usage": usage}, {}, "t")
    assert (r.stop_reason, r.tokens, r.cost) == ("final", 0, 0.0)


# -- what tools return ----------------------------------------------------------------------


class Shown:
    def __str__(self) -> str:
        return "shown as a string"


@pytest.mark.parametrize(
    "value",
    [7, -1.5, [1, "a"], {"k": [1, 2]}, None, True, (1,), Shown(), b"raw", {1, 2}],
    # Not repr: Shown's holds its address, and pytest-xdist workers must agree on the ids.
    ids=lambda value: "Shown" if isinstance(value, Shown) else repr(value),
)
def test_a_tool_result_is_observed_as_str(value: object) -> None:
    def model(tr: Transcript) -> Any:
        if len(tr) == 1:
            return {"type": "tool", "name": "f", "args": {}}
        return {"type": "final", "content": tr[-1]["content"]}

    r = run_agent(model, {"f": lambda: value}, "t")
    assert r.transcript[2] == {
        "role": "tool",
        "name": "f",
        "content": str(value),
        "is_error": False,
    }
    assert isinstance(r.transcript[2]["content"], str)
    assert r.output == str(value)


def test_a_tool_whose_result_cannot_be_shown_is_an_error() -> None:
    class Broken:
        def __str__(self) -> str:
            raise ValueError("no text for you")

    def model(tr: Transcript) -> Any:
        if len(tr) == 1:
            return {"type": "tool", "name": "f", "args": {}}
        return {"type": "final", "content": tr[-1]["content"]}

    r = run_agent(model, {"f": lambda: Broken()}, "t")
    assert r.transcript[2]["is_error"] is True
    assert r.transcript[2]["content"] == "ValueError: no text for you"
