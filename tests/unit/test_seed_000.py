"""Seed 000's contract: `run_agent` with budgets and named stop reasons, edge cases included."""

# The seed's own tests are copied verbatim, long lines and all.
# ruff: noqa: E501

from __future__ import annotations

import inspect
from typing import Any

import pytest

import runner
from runner import run_agent
from runner.testing import FunctionModel

Transcript = list[dict[str, Any]]


# fmt: off
def test_seed_000_tests_verbatim() -> None:
    # The seed's tests.py, exactly as written.
    tools = {"add": lambda a, b: a + b, "div": lambda a, b: a / b, "search": lambda q: f"results for {q}"}
    def solver(tr):
        obs = [m for m in tr if m["role"] == "tool"]
        if not obs:
            return {"type": "tool", "name": "add", "args": {"b": 3, "a": 2}}
        return {"type": "final", "content": obs[-1]["content"]}
    r = run_agent(solver, tools, "2+3?")
    assert (r.stop_reason, r.output, r.steps) == ("final", "5", 2)
    r = run_agent(lambda tr: {"type": "tool", "name": "search", "args": {"q": "x"}}, tools, "loop")
    assert r.stop_reason == "repeated_call" and r.steps == 3
    r = run_agent(lambda tr: {"type": "tool", "name": "search", "args": {"q": len(tr)}}, tools, "wander", max_steps=5)
    assert r.stop_reason == "max_steps" and r.steps == 5
    r = run_agent(lambda tr: {"type": "tool", "name": "div", "args": {"a": len(tr), "b": 0}}, tools, "fail")
    assert r.stop_reason == "tool_errors" and r.steps == 3
    assert all(m["is_error"] for m in r.transcript if m["role"] == "tool")
    r = run_agent(lambda tr: {"type": "tool", "name": "search", "args": {"q": len(tr)}, "usage": 4000}, tools, "spend")
    assert r.stop_reason == "token_budget" and r.steps == 3
    def recovers(tr):
        obs = [m for m in tr if m["role"] == "tool"]
        if not obs:
            return {"type": "tool", "name": "nope", "args": {}}
        if obs[-1]["is_error"]:
            return {"type": "tool", "name": "div", "args": {"a": 6, "b": 3}}
        return {"type": "final", "content": obs[-1]["content"]}
    r = run_agent(recovers, tools, "recover")
    assert (r.stop_reason, r.output) == ("final", "2.0")
    assert "LookupError" in r.transcript[2]["content"]
# fmt: on


# -- helpers ------------------------------------------------------------------------------


def wander(usage: Any = None) -> Any:
    """A model that never repeats itself: each call searches for the transcript's length."""

    def model(tr: Transcript) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "tool", "name": "search", "args": {"q": len(tr)}}
        if usage is not None:
            out["usage"] = usage
        return out

    return model


def search(q: object) -> str:
    return f"results for {q}"


def boom(**_: object) -> str:
    raise RuntimeError("kaput")


# -- token budget -------------------------------------------------------------------------


def test_tokens_exactly_at_the_budget_continue() -> None:
    # 5 steps of 2000 = 10_000 == max_tokens: never over, so the step cap ends the run.
    r = run_agent(wander(2000), {"search": search}, "t", max_steps=5)
    assert r.stop_reason == "max_steps"
    assert r.steps == 5
    assert r.tokens == 10_000


def test_one_token_over_the_budget_stops() -> None:
    model = FunctionModel(wander(2000))
    r = run_agent(model, {"search": search}, "t", max_steps=10, max_tokens=9_999)
    assert r.stop_reason == "token_budget"
    assert r.steps == 5
    assert r.output is None
    assert model.calls == 5
    # The action that broke the budget is not in the transcript: task + 4 pairs.
    assert len(r.transcript) == 1 + 2 * 4
    assert r.tokens == 10_000


def test_max_tokens_zero_with_zero_usage_runs() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "final", "content": "done", "usage": 0}

    r = run_agent(model, {}, "t", max_tokens=0)
    assert (r.stop_reason, r.output, r.steps, r.tokens) == ("final", "done", 1, 0)


def test_max_tokens_zero_with_usage_one_stops_at_step_one() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "final", "content": "done", "usage": 1}

    r = run_agent(model, {}, "t", max_tokens=0)
    assert (r.stop_reason, r.output, r.steps, r.tokens) == ("token_budget", None, 1, 1)
    # The token check comes before the final: the answer is not in the transcript.
    assert r.transcript == [{"role": "user", "content": "t"}]


def test_token_budget_beats_a_final_in_the_same_step() -> None:
    calls = 0

    def model(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "tool", "name": "search", "args": {"q": 1}, "usage": 6}
        return {"type": "final", "content": "late", "usage": 6}

    r = run_agent(model, {"search": search}, "t", max_tokens=10)
    assert (r.stop_reason, r.output, r.steps) == ("token_budget", None, 2)


def test_usage_float_is_truncated_like_int() -> None:
    # The seed adds int(usage): 1.9 counts as 1 token each step.
    r = run_agent(wander(1.9), {"search": search}, "t", max_steps=3, max_tokens=3)
    assert r.stop_reason == "max_steps"
    assert r.tokens == 3


def test_huge_integer_usage_is_a_token_budget_stop() -> None:
    # The seed adds int(usage) to an int, so any size of usage is just "over the budget".
    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "final", "content": "x", "usage": 10**400}

    r = run_agent(model, {}, "t")
    assert (r.stop_reason, r.steps) == ("token_budget", 1)
    assert r.tokens == 10**400


def test_max_tokens_none_is_unlimited() -> None:
    r = run_agent(wander(10**9), {"search": search}, "t", max_steps=3, max_tokens=None)
    assert r.stop_reason == "max_steps"


# -- steps --------------------------------------------------------------------------------


def test_max_steps_zero_takes_zero_steps() -> None:
    model = FunctionModel(lambda tr: {"type": "final", "content": "never"})
    r = run_agent(model, {}, "the task", max_steps=0)
    assert (r.stop_reason, r.output, r.steps) == ("max_steps", None, 0)
    assert r.transcript == [{"role": "user", "content": "the task"}]
    assert model.calls == 0


def test_final_on_the_last_allowed_step_is_a_final() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        if len(tr) >= 5:
            return {"type": "final", "content": "in time"}
        return {"type": "tool", "name": "search", "args": {"q": len(tr)}}

    r = run_agent(model, {"search": search}, "t", max_steps=3)
    assert (r.stop_reason, r.output, r.steps) == ("final", "in time", 3)


def test_tool_errors_on_the_last_step_beat_max_steps() -> None:
    # The seed checks the error streak inside the step, before the loop runs out.
    r = run_agent(
        lambda tr: {"type": "tool", "name": "boom", "args": {"n": len(tr)}},
        {"boom": boom},
        "t",
        max_steps=3,
    )
    assert (r.stop_reason, r.steps) == ("tool_errors", 3)


# -- repeats ------------------------------------------------------------------------------


def test_max_repeats_zero_stops_at_the_first_call() -> None:
    ran: list[object] = []

    def tool(q: object) -> str:
        ran.append(q)
        return "r"

    r = run_agent(
        lambda tr: {"type": "tool", "name": "search", "args": {"q": "x"}},
        {"search": tool},
        "t",
        max_repeats=0,
    )
    assert (r.stop_reason, r.output, r.steps) == ("repeated_call", None, 1)
    assert r.transcript == [{"role": "user", "content": "t"}]
    assert ran == []


def test_the_repeat_that_trips_is_not_in_the_transcript_and_does_not_run() -> None:
    ran: list[object] = []

    def tool(q: object) -> str:
        ran.append(q)
        return "r"

    r = run_agent(
        lambda tr: {"type": "tool", "name": "search", "args": {"q": "x"}},
        {"search": tool},
        "t",
    )
    assert (r.stop_reason, r.steps) == ("repeated_call", 3)
    assert ran == ["x", "x"]
    assert [m["role"] for m in r.transcript] == ["user", "assistant", "tool", "assistant", "tool"]


def test_key_order_does_not_hide_a_repeat() -> None:
    orders = [{"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 1, "b": 2}]

    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "tool", "name": "add", "args": orders[(len(tr) - 1) // 2]}

    r = run_agent(model, {"add": lambda a, b: a + b}, "t", max_repeats=2)
    assert (r.stop_reason, r.steps) == ("repeated_call", 3)


def test_nested_key_order_does_not_hide_a_repeat() -> None:
    orders = [{"x": {"p": 1, "q": 2}}, {"x": {"q": 2, "p": 1}}]

    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "tool", "name": "f", "args": orders[(len(tr) - 1) // 2]}

    r = run_agent(model, {"f": lambda x: "ok"}, "t", max_repeats=1)
    assert (r.stop_reason, r.steps) == ("repeated_call", 2)


def test_repeats_need_not_be_consecutive() -> None:
    # The seed counts every identical call over the run, not a streak.
    script = [{"q": "a"}, {"q": "b"}, {"q": "a"}, {"q": "b"}, {"q": "a"}]

    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "tool", "name": "search", "args": script[(len(tr) - 1) // 2]}

    r = run_agent(model, {"search": search}, "t", max_steps=8)
    assert (r.stop_reason, r.steps) == ("repeated_call", 5)


def test_same_args_different_tool_is_not_a_repeat() -> None:
    names = ["s1", "s2", "s1", "s2"]

    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "tool", "name": names[(len(tr) - 1) // 2], "args": {"q": 1}}

    r = run_agent(model, {"s1": search, "s2": search}, "t", max_steps=4, max_repeats=1)
    assert (r.stop_reason, r.steps) == ("repeated_call", 3)


def test_max_repeats_none_is_unlimited() -> None:
    r = run_agent(
        lambda tr: {"type": "tool", "name": "search", "args": {"q": "x"}},
        {"search": search},
        "t",
        max_repeats=None,
    )
    assert (r.stop_reason, r.steps) == ("max_steps", 8)


# -- errors -------------------------------------------------------------------------------


def test_max_consecutive_errors_zero_stops_at_the_first_error() -> None:
    r = run_agent(
        lambda tr: {"type": "tool", "name": "div", "args": {"a": 1, "b": 0}},
        {"div": lambda a, b: a / b},
        "t",
        max_consecutive_errors=0,
    )
    assert (r.stop_reason, r.output, r.steps) == ("tool_errors", None, 1)
    assert r.transcript[-1] == {
        "role": "tool",
        "name": "div",
        "content": "ZeroDivisionError: division by zero",
        "is_error": True,
    }


def test_a_success_resets_the_error_streak() -> None:
    # error, error, ok, error, error, final: the streak never exceeds 2.
    plan = ["bad", "bad", "ok", "bad", "bad"]

    def model(tr: Transcript) -> dict[str, Any]:
        i = (len(tr) - 1) // 2
        if i == len(plan):
            return {"type": "final", "content": "survived"}
        return {"type": "tool", "name": plan[i], "args": {"n": i}}

    r = run_agent(model, {"bad": boom, "ok": lambda n: "fine"}, "t")
    assert (r.stop_reason, r.output, r.steps) == ("final", "survived", 6)


def test_unknown_tool_is_an_error_observation() -> None:
    r = run_agent(lambda tr: {"type": "tool", "name": "nope", "args": {"n": len(tr)}}, {}, "t")
    assert r.stop_reason == "tool_errors"
    assert r.transcript[2] == {
        "role": "tool",
        "name": "nope",
        "content": "LookupError: unknown tool nope",
        "is_error": True,
    }


def test_tool_exception_text_is_type_and_message() -> None:
    def picky(**kw: object) -> str:
        raise KeyError("missing")

    r = run_agent(
        lambda tr: {"type": "tool", "name": "p", "args": {"n": len(tr)}},
        {"p": picky},
        "t",
        max_consecutive_errors=0,
    )
    assert r.transcript[2]["content"] == "KeyError: 'missing'"


def test_wrong_arguments_to_a_tool_are_an_error_observation() -> None:
    r = run_agent(
        lambda tr: {"type": "tool", "name": "add", "args": {"a": 1}},
        {"add": lambda a, b: a + b},
        "t",
        max_consecutive_errors=0,
    )
    assert r.stop_reason == "tool_errors"
    assert r.transcript[2]["content"].startswith("TypeError: ")
    assert "missing 1 required positional argument: 'b'" in r.transcript[2]["content"]


# -- falsy results --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", 0, None, False, [], {}, 0.0])
def test_falsy_tool_result_is_observed_as_str(value: object) -> None:
    def model(tr: Transcript) -> dict[str, Any]:
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
    assert (r.stop_reason, r.output, r.steps) == ("final", str(value), 2)


def test_final_content_is_returned_as_given() -> None:
    answer = {"n": 5}
    r = run_agent(lambda tr: {"type": "final", "content": answer}, {}, "t")
    assert r.output is answer
    assert r.transcript[-1] == {"role": "assistant", "content": answer}


# -- transcript shapes ----------------------------------------------------------------------


def test_transcript_entries_have_exactly_the_seeds_shapes() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        if len(tr) == 1:
            return {"type": "tool", "name": "add", "args": {"b": 3, "a": 2}, "usage": 1}
        return {"type": "final", "content": "5", "usage": 1}

    r = run_agent(model, {"add": lambda a, b: a + b}, "2+3?")
    assert r.transcript == [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "tool": "add", "args": {"b": 3, "a": 2}},
        {"role": "tool", "name": "add", "content": "5", "is_error": False},
        {"role": "assistant", "content": "5"},
    ]
    assert [sorted(m) for m in r.transcript] == [
        ["content", "role"],
        ["args", "role", "tool"],
        ["content", "is_error", "name", "role"],
        ["content", "role"],
    ]
    assert r.tokens == 2


def test_missing_args_default_to_an_empty_dict() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        if len(tr) == 1:
            return {"type": "tool", "name": "f"}
        return {"type": "final", "content": tr[-1]["content"]}

    r = run_agent(model, {"f": lambda: "called"}, "t")
    assert r.transcript[1] == {"role": "assistant", "tool": "f", "args": {}}
    assert r.output == "called"


def test_the_model_sees_the_transcript_as_it_grows() -> None:
    seen: list[Transcript] = []

    def model(tr: Transcript) -> dict[str, Any]:
        seen.append([dict(m) for m in tr])
        if len(tr) < 5:
            return {"type": "tool", "name": "search", "args": {"q": len(tr)}}
        return {"type": "final", "content": "ok"}

    r = run_agent(model, {"search": search}, "t")
    assert [len(s) for s in seen] == [1, 3, 5]
    assert seen[1][2] == {
        "role": "tool",
        "name": "search",
        "content": "results for 1",
        "is_error": False,
    }
    assert r.steps == 3


# -- the result -----------------------------------------------------------------------------


def test_stop_reason_is_a_stop_reason_equal_to_plain_strings() -> None:
    r = run_agent(lambda tr: {"type": "final", "content": "x"}, {}, "t")
    assert isinstance(r.stop_reason, runner.StopReason)
    assert r.stop_reason == "final"
    assert r.stop_reason is runner.StopReason.FINAL
    assert str(r.stop_reason) == "final"
    assert f"{r.stop_reason}" == "final"
    assert {r.stop_reason: 1} == {"final": 1}


def test_stop_reasons_cover_the_seeds_strings() -> None:
    values = {member.value for member in runner.StopReason}
    assert {"final", "max_steps", "token_budget", "repeated_call", "tool_errors"} <= values
    for member in runner.StopReason:
        assert member == member.value


def test_result_has_the_seeds_fields_first() -> None:
    r = run_agent(lambda tr: {"type": "final", "content": "x"}, {}, "t")
    assert list(vars(r))[:4] == ["stop_reason", "output", "steps", "transcript"]
    assert isinstance(r, runner.AgentResult)


def test_signature_is_positional_with_the_seeds_defaults() -> None:
    params = inspect.signature(run_agent).parameters
    names = list(params)[:7]
    assert names == [
        "model",
        "tools",
        "task",
        "max_steps",
        "max_tokens",
        "max_consecutive_errors",
        "max_repeats",
    ]
    for name in names:
        assert params[name].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert params["max_steps"].default == 8
    assert params["max_tokens"].default == 10_000
    assert params["max_consecutive_errors"].default == 2
    assert params["max_repeats"].default == 2
    # Everything after the seed's seven parameters is keyword-only.
    for name in list(params)[7:]:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_budgets_can_be_passed_positionally() -> None:
    # max_steps=5, max_tokens=100, max_consecutive_errors=1, max_repeats=1
    r = run_agent(
        lambda tr: {"type": "tool", "name": "search", "args": {"q": "x"}},
        {"search": search},
        "t",
        5,
        100,
        1,
        1,
    )
    assert (r.stop_reason, r.steps) == ("repeated_call", 2)
    r = run_agent(wander(60), {"search": search}, "t", 5, 100, 1, 1)
    assert (r.stop_reason, r.steps) == ("token_budget", 2)
    r = run_agent(wander(), {"search": search}, "t", 2, 100, 1, 1)
    assert (r.stop_reason, r.steps) == ("max_steps", 2)
