"""Seed 004's contract: `agent_loop` plays scripted moves exactly like the seed's reference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner import agent_loop


def reference_agent_loop(model_outputs, tools, max_steps):  # type: ignore[no-untyped-def]
    # The seed's reference solution, verbatim.
    observations = []
    answer = None
    status = "max_steps"
    steps = 0
    while steps < max_steps and steps < len(model_outputs):
        out = model_outputs[steps]
        steps += 1
        if out["type"] == "final":
            answer = out["text"]
            status = "answered"
            break
        name, arg = out["name"], out["arg"]
        if name not in tools:
            observations.append("unknown_tool")
        elif arg not in tools[name]:
            observations.append("unknown_arg")
        else:
            observations.append(tools[name][arg])
    return {"answer": answer, "steps": steps, "observations": observations, "status": status}


T = {"search": {"cats": "felis catus"}, "calc": {"2+2": "4"}}
FIRST = [
    {"type": "tool", "name": "search", "arg": "cats"},
    {"type": "final", "text": "felis catus"},
]
# The walkthrough: the first example's moves with two bad calls (a hallucinated tool, then a
# real tool with an argument it does not know) added before the answer.
WALKTHROUGH = [
    {"type": "tool", "name": "search", "arg": "cats"},
    {"type": "tool", "name": "web", "arg": "cats"},
    {"type": "tool", "name": "calc", "arg": "2+3"},
    {"type": "final", "text": "felis catus"},
]


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What a call returned, or the type and args of what it raised."""
    try:
        return ("returned", fn(*args))
    except Exception as exc:
        return ("raised", type(exc), exc.args)


def both(moves: Any, tools: Any, max_steps: Any) -> dict[str, Any]:
    """Run the implementation, check the reference agrees exactly, return the result."""
    got = outcome(agent_loop, moves, tools, max_steps)
    assert got == outcome(reference_agent_loop, moves, tools, max_steps)
    assert got[0] == "returned"
    result: dict[str, Any] = got[1]
    return result


# -- the seed's example and walkthrough -----------------------------------------------------


def test_the_seeds_example() -> None:
    assert agent_loop(FIRST, T, 5) == {
        "answer": "felis catus",
        "steps": 2,
        "observations": ["felis catus"],
        "status": "answered",
    }


def test_result_keys_in_the_seeds_order() -> None:
    assert list(agent_loop(FIRST, T, 5)) == ["answer", "steps", "observations", "status"]


def test_walkthrough_with_room_answers_after_the_bad_calls() -> None:
    assert both(WALKTHROUGH, T, 5) == {
        "answer": "felis catus",
        "steps": 4,
        "observations": ["felis catus", "unknown_tool", "unknown_arg"],
        "status": "answered",
    }


# -- "Edge cases to test" -------------------------------------------------------------------


def test_max_steps_zero_with_a_final_waiting() -> None:
    assert both([{"type": "final", "text": "x"}], T, 0) == {
        "answer": None,
        "steps": 0,
        "observations": [],
        "status": "max_steps",
    }


def test_no_moves_at_all() -> None:
    assert both([], T, 5) == {
        "answer": None,
        "steps": 0,
        "observations": [],
        "status": "max_steps",
    }


def test_walkthrough_capped_at_three_steps() -> None:
    # The cap wins even though the final was the very next move.
    assert both(WALKTHROUGH, T, 3) == {
        "answer": None,
        "steps": 3,
        "observations": ["felis catus", "unknown_tool", "unknown_arg"],
        "status": "max_steps",
    }


def test_a_move_after_the_final_never_runs() -> None:
    moves = [{"type": "final", "text": "a"}, {"type": "tool", "name": "search", "arg": "cats"}]
    assert both(moves, T, 5) == {
        "answer": "a",
        "steps": 1,
        "observations": [],
        "status": "answered",
    }


@pytest.mark.parametrize("value", ["", 0, None, False, [], 0.0])
def test_a_falsy_tool_result_is_observed_as_itself(value: Any) -> None:
    moves = [{"type": "tool", "name": "s", "arg": "a"}]
    result = both(moves, {"s": {"a": value}}, 5)
    assert result["observations"] == [value]
    assert type(result["observations"][0]) is type(value)
    assert result["observations"] != ["unknown_arg"]


def test_observations_are_the_table_values_themselves() -> None:
    value = {"not": "a string"}
    result = both([{"type": "tool", "name": "s", "arg": "a"}], {"s": {"a": value}}, 5)
    assert result["observations"][0] is value


@pytest.mark.parametrize(
    "name", ["toString", "__class__", "keys", "get", "__getitem__", "items", "__dict__", "copy"]
)
def test_a_tool_named_like_an_inherited_attribute_is_unknown(name: str) -> None:
    result = both([{"type": "tool", "name": name, "arg": "cats"}], T, 5)
    assert result["observations"] == ["unknown_tool"]


@pytest.mark.parametrize("arg", ["toString", "__class__", "keys", "get", "__len__"])
def test_an_arg_named_like_an_inherited_attribute_is_unknown(arg: str) -> None:
    result = both([{"type": "tool", "name": "search", "arg": arg}], T, 5)
    assert result["observations"] == ["unknown_arg"]


def test_inherited_names_that_really_are_tools_are_found() -> None:
    tools = {"toString": {"keys": "k"}, "__class__": {"get": "g"}}
    moves = [
        {"type": "tool", "name": "toString", "arg": "keys"},
        {"type": "tool", "name": "__class__", "arg": "get"},
    ]
    assert both(moves, tools, 5)["observations"] == ["k", "g"]


# -- "Common mistakes" ----------------------------------------------------------------------


def test_a_lone_final_answers_in_one_step() -> None:
    # Incrementing steps before reading the move would skip it and raise IndexError.
    assert both([{"type": "final", "text": "only"}], T, 5) == {
        "answer": "only",
        "steps": 1,
        "observations": [],
        "status": "answered",
    }


def test_a_hallucinated_tool_is_unknown_tool_not_a_key_error() -> None:
    result = both([{"type": "tool", "name": "web", "arg": "cats"}], T, 5)
    assert result["observations"] == ["unknown_tool"]
    assert result["observations"] != ["unknown_arg"]


def test_a_hallucinated_arg_is_unknown_arg() -> None:
    result = both([{"type": "tool", "name": "calc", "arg": "cats"}], T, 5)
    assert result["observations"] == ["unknown_arg"]


def test_running_out_of_moves_and_hitting_the_cap_are_both_max_steps() -> None:
    moves = [{"type": "tool", "name": "search", "arg": "cats"}] * 3
    ran_out = both(moves, T, 10)
    capped = both(moves, T, 2)
    assert (ran_out["status"], ran_out["steps"]) == ("max_steps", 3)
    assert (capped["status"], capped["steps"]) == ("max_steps", 2)
    assert ran_out["answer"] is None and capped["answer"] is None


def test_a_final_breaks_the_loop() -> None:
    moves = [
        {"type": "tool", "name": "search", "arg": "cats"},
        {"type": "final", "text": "first"},
        {"type": "final", "text": "second"},
        {"type": "tool", "name": "calc", "arg": "2+2"},
    ]
    assert both(moves, T, 10) == {
        "answer": "first",
        "steps": 2,
        "observations": ["felis catus"],
        "status": "answered",
    }


# -- beyond the listed cases ----------------------------------------------------------------


@pytest.mark.parametrize("max_steps", [-1, -5])
def test_negative_max_steps_takes_no_steps(max_steps: int) -> None:
    assert both(FIRST, T, max_steps) == {
        "answer": None,
        "steps": 0,
        "observations": [],
        "status": "max_steps",
    }


def test_repeated_identical_calls_are_not_stopped() -> None:
    # The seed has no repeat budget: the same call ten times is ten observations.
    moves = [{"type": "tool", "name": "search", "arg": "cats"}] * 10
    result = both(moves, T, 20)
    assert result["observations"] == ["felis catus"] * 10
    assert result["steps"] == 10


def test_a_long_error_streak_is_not_stopped() -> None:
    # Nor an error budget: every bad call is just another observation.
    moves = [{"type": "tool", "name": "web", "arg": "x"}] * 6 + [{"type": "final", "text": "ok"}]
    result = both(moves, T, 20)
    assert result["observations"] == ["unknown_tool"] * 6
    assert (result["status"], result["steps"]) == ("answered", 7)


def test_any_non_final_type_is_a_tool_call() -> None:
    moves = [{"type": "act", "name": "search", "arg": "cats"}, {"type": "final", "text": "y"}]
    assert both(moves, T, 5)["observations"] == ["felis catus"]


def test_a_final_text_of_any_kind_is_the_answer() -> None:
    for text in [None, "", 0, ["a"]]:
        result = both([{"type": "final", "text": text}], T, 5)
        assert result["status"] == "answered"
        assert result["answer"] == text


def test_args_that_json_would_change_are_looked_up_as_given() -> None:
    tools = {"t": {(1, 2): "tuple", 3: "int", None: "none", frozenset({1}): "set"}}
    moves = [
        {"type": "tool", "name": "t", "arg": (1, 2)},
        {"type": "tool", "name": "t", "arg": 3},
        {"type": "tool", "name": "t", "arg": None},
        {"type": "tool", "name": "t", "arg": frozenset({1})},
        {"type": "tool", "name": "t", "arg": "3"},
    ]
    assert both(moves, tools, 10)["observations"] == ["tuple", "int", "none", "set", "unknown_arg"]


def test_tool_names_need_not_be_strings() -> None:
    tools = {1: {"a": "one"}, (2, 3): {"b": "pair"}}
    moves = [
        {"type": "tool", "name": 1, "arg": "a"},
        {"type": "tool", "name": (2, 3), "arg": "b"},
        {"type": "tool", "name": "1", "arg": "a"},
    ]
    assert both(moves, tools, 10)["observations"] == ["one", "pair", "unknown_tool"]


def test_a_fractional_cap_compares_like_the_reference() -> None:
    moves = [{"type": "tool", "name": "search", "arg": "cats"}] * 5
    assert both(moves, T, 2.5)["steps"] == 3


@pytest.mark.parametrize(
    "moves",
    [
        [{"type": "tool", "name": "search"}],  # no arg
        [{"type": "tool", "arg": "cats"}],  # no name
        [{"type": "final"}],  # no text
        [{"name": "search", "arg": "cats"}],  # no type
        [None],
        [{"type": "tool", "name": ["search"], "arg": "cats"}],  # unhashable name
        [{"type": "tool", "name": "search", "arg": ["cats"]}],  # unhashable arg
        [FIRST[0], {"type": "tool", "name": "search"}],  # bad second move
    ],
)
def test_a_malformed_move_raises_what_the_reference_raises(moves: list[Any]) -> None:
    got = outcome(agent_loop, moves, T, 5)
    assert got[0] == "raised"
    assert got == outcome(reference_agent_loop, moves, T, 5)


def test_a_malformed_move_past_the_cap_is_never_read() -> None:
    moves = [FIRST[0], {"type": "tool"}]
    assert both(moves, T, 1)["observations"] == ["felis catus"]


def test_an_unhashable_arg_to_an_unknown_tool_is_just_unknown_tool() -> None:
    # The reference checks the name first, so the arg is never hashed.
    assert both([{"type": "tool", "name": "web", "arg": ["x"]}], T, 5)["observations"] == [
        "unknown_tool"
    ]


# -- random scripts against the reference ---------------------------------------------------

NAMES = st.one_of(
    st.sampled_from(["search", "calc", "s", "web", "toString", "__class__", "keys", "get", ""]),
    st.integers(0, 2),  # the seed's tools are any dict: its names need not be strings
)
ARGS = st.one_of(
    st.sampled_from(["cats", "2+2", "a", "", "toString", "keys"]),
    st.integers(-2, 2),
    st.none(),
    st.booleans(),
    st.tuples(st.integers(0, 1), st.integers(0, 1)),
)
VALUES = st.one_of(st.text(max_size=3), st.integers(-2, 2), st.none(), st.just(""), st.just(0))
TOOL_MOVES = st.builds(lambda name, arg: {"type": "tool", "name": name, "arg": arg}, NAMES, ARGS)
FINAL_MOVES = st.builds(
    lambda text: {"type": "final", "text": text}, st.one_of(st.text(max_size=3), st.none())
)
MOVES = st.lists(st.one_of(TOOL_MOVES, TOOL_MOVES, FINAL_MOVES), max_size=8)
TABLES = st.dictionaries(NAMES, st.dictionaries(ARGS, VALUES, max_size=4), max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    moves=MOVES,
    tools=TABLES,
    max_steps=st.one_of(st.integers(-2, 10), st.floats(-2, 10, allow_nan=False)),
)
def test_random_scripts_match_the_reference(
    moves: list[dict[str, Any]], tools: dict[Any, dict[Any, Any]], max_steps: float
) -> None:
    both(moves, tools, max_steps)


BAD_MOVES = st.sampled_from(
    [
        {"type": "tool", "name": "search"},
        {"type": "final"},
        {"type": "tool", "name": ["x"], "arg": "a"},
        {"type": "tool", "name": "search", "arg": ["x"]},
        {},
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    moves=st.lists(st.one_of(TOOL_MOVES, FINAL_MOVES, BAD_MOVES), max_size=6),
    tools=TABLES,
    max_steps=st.integers(-1, 8),
)
def test_random_scripts_with_malformed_moves_fail_like_the_reference(
    moves: list[dict[str, Any]], tools: dict[str, dict[Any, Any]], max_steps: int
) -> None:
    assert outcome(agent_loop, moves, tools, max_steps) == outcome(
        reference_agent_loop, moves, tools, max_steps
    )
