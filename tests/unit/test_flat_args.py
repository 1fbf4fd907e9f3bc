"""A tool call's flat arguments (plain scalars only) are copied and written as JSON without
json's encoder (runner.core.actions): exactly what the JSON round trip made of them, the
canonical text included, and the same refusal where JSON cannot carry a value."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from runner.core.actions import ActionKind, parse_action

_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=8)
_scalars = st.one_of(
    _text,
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)


def round_tripped(args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What the arguments became before the flat path: their JSON round trip."""
    canonical = json.dumps(args, sort_keys=True, allow_nan=False)
    return json.loads(canonical), canonical


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_text, _scalars, max_size=6))
@example({"\ud800": "\udfff", "é": "\x00\u2028", "b": -0.0, "a": 5e-324, "c": 1e16})
def test_flat_arguments_are_what_their_json_round_trip_gives(args: dict[str, Any]) -> None:
    action = parse_action({"type": "tool", "name": "t", "args": args})
    assert action.kind is ActionKind.TOOL
    expected, canonical = round_tripped(args)
    assert action.canonical_args == canonical
    assert action.args == expected and list(action.args or {}) == list(expected)
    for key, value in (action.args or {}).items():  # the same types, -0.0 kept
        assert type(value) is type(expected[key])
        if type(value) is float:
            assert math.copysign(1, value) == math.copysign(1, expected[key])


def test_an_int_too_long_for_text_is_refused_as_json_refuses_it() -> None:
    huge = 10**5000
    try:
        json.dumps({"n": huge})
    except ValueError as exc:
        why = f"tool 'args' are not valid JSON: {exc}"
    else:  # an interpreter with no limit on an int's digits: it is written as it is
        action = parse_action({"type": "tool", "name": "t", "args": {"n": huge}})
        assert action.canonical_args == json.dumps({"n": huge})
        return
    action = parse_action({"type": "tool", "name": "t", "args": {"n": huge}})
    assert action.kind is ActionKind.INVALID
    assert action.error == why[:500] + ("..." if len(why) > 500 else "")


def test_the_common_cases_taken_at_once_parse_as_before() -> None:
    # A plain int of usage, and a tool name of ASCII text, skip the general checks.
    for usage in (0, 7, 2**70):
        action = parse_action({"type": "tool", "name": "t", "args": {}, "usage": usage})
        assert (action.kind, action.tokens, action.cost) == (ActionKind.TOOL, usage, 0.0)
    for usage in (True, -1):
        action = parse_action({"type": "tool", "name": "t", "args": {}, "usage": usage})
        assert action.kind is ActionKind.INVALID and "usage" in (action.error or "")
    assert parse_action({"type": "tool", "name": "é", "args": {}}).tool == "é"
    for name, why in [("se\ud800arch", "surrogate"), ("a\x00b", "NUL"), ("x" * 201, "201")]:
        action = parse_action({"type": "tool", "name": name, "args": {}})
        assert action.kind is ActionKind.INVALID and why in (action.error or ""), action.error
