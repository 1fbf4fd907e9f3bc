"""The multi-call form parsed: every call usable, or the whole response is invalid."""

from __future__ import annotations

from typing import Any

import pytest

from runner.core.actions import MAX_TOOL_NAME, parse_action


def calls(*shapes: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool", "calls": list(shapes), **extra}


def test_calls_of_one_element_are_a_single_call() -> None:
    action = parse_action(calls({"id": "c1", "name": "add", "args": {"a": 1}}, text="Adding."))
    assert (action.tool, action.args, action.call_id, action.text) == (
        "add",
        {"a": 1},
        "c1",
        "Adding.",
    )
    assert action.calls == ()


def test_arguments_round_trip_through_json_for_each_call() -> None:
    action = parse_action(calls({"name": "a", "args": {"t": (1, 2)}}, {"name": "b"}))
    assert [c.args for c in action.calls] == [{"t": [1, 2]}, {}]  # a missing args is {}


def test_empty_text_is_no_text() -> None:
    action = parse_action(calls({"name": "a", "args": {}}, {"name": "b", "args": {}}, text=""))
    assert action.text is None


@pytest.mark.parametrize(
    ("output", "error"),
    [
        (calls(), "tool 'calls' must be a non-empty list, got []"),
        ({"type": "tool", "calls": "add"}, "tool 'calls' must be a non-empty list"),
        ({"type": "tool", "calls": None}, "tool 'calls' must be a non-empty list"),
        (calls({"name": "a", "args": {}}, "b"), "call 2 must be a dict with 'name' and 'args'"),
        (calls({"name": "a", "args": {}}, {"name": 3}), "call 2: tool 'name' must be a string"),
        (calls({"name": "a", "args": [1]}, {"name": "b"}), "call 1: tool 'args' must be a JSON"),
        (
            calls({"name": "a", "args": {"x": float("nan")}}, {"name": "b"}),
            "call 1: tool 'args' are not valid JSON",
        ),
        (calls({"name": "a", "id": 7}, {"name": "b"}), "call 1: tool call 'id' must be a string"),
        (
            calls({"name": "a", "id": "x" * (MAX_TOOL_NAME + 1)}, {"name": "b"}),
            f"call 1: tool call 'id' is {MAX_TOOL_NAME + 1} characters long",
        ),
        (calls({"name": "a", "id": "a\x00"}, {"name": "b"}), "call 1: tool call 'id' must not"),
        (
            calls({"name": "a", "id": "same"}, {"name": "b", "id": "same"}),
            "the calls' ids must differ from one another",
        ),
        (calls({"name": "a"}, {"name": "b"}, text=5), "'text' must be a string, got 5"),
        ({"type": "tool", "name": "a", "args": {}, "id": 1.5}, "tool call 'id' must be a string"),
        ({"type": "tool", "name": "a", "args": {}, "text": ["x"]}, "'text' must be a string"),
    ],
)
def test_a_malformed_batch_is_an_invalid_action(output: dict[str, Any], error: str) -> None:
    action = parse_action({**output, "usage": 7})
    assert action.kind == "invalid"
    assert (action.error or "").startswith(error), action.error
    assert action.tokens == 7  # the model call was still spent


def test_a_name_beside_calls_is_the_single_call_form() -> None:
    # As before several calls existed: `name` decides, a stray `calls` is ignored.
    action = parse_action({"type": "tool", "name": "a", "args": {}, "calls": [{"name": "b"}]})
    assert (action.tool, action.calls) == ("a", ())
