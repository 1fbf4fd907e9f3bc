"""Any transcript the loop can make becomes a request each API accepts, the same every time."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner import ModelFatal
from runner.core.context import compose, cut_observations, last_steps
from runner.models import AnthropicMessages, OpenAIChat
from runner.models.turns import NO_RESULT, Call, Calls, Result, Text, read_transcript

Transcript = list[dict[str, Any]]
TASK = {"role": "user", "content": "task"}

ids = st.none() | st.sampled_from(["call_a", "toolu_b", "c-3"])
texts = st.none() | st.sampled_from(["", "Let me see.", "ü ✓"])
args = st.dictionaries(st.sampled_from(["a", "b", "q"]), st.integers() | st.text(max_size=3))


@st.composite
def steps(draw: st.DrawFn) -> Transcript:
    kind = draw(st.sampled_from(["one", "several", "invalid"]))
    if kind == "invalid":
        return [
            {"role": "assistant", "invalid": "'oops'"},
            {
                "role": "tool",
                "name": draw(st.none() | st.just("add")),
                "content": "InvalidAction: x",
                "is_error": True,
            },
        ]
    count = 1 if kind == "one" else draw(st.integers(2, 3))
    calls = [{"name": f"tool{n}", "args": draw(args)} for n in range(count)]
    given_ids = draw(st.booleans())
    for n, call in enumerate(calls):
        if given_ids:
            call["id"] = f"id{n}_{draw(st.integers(0, 99))}"
    if kind == "one":
        message: dict[str, Any] = {
            "role": "assistant",
            "tool": calls[0]["name"],
            "args": calls[0]["args"],
        }
        if "id" in calls[0]:
            message["id"] = calls[0]["id"]
    else:
        message = {"role": "assistant", "calls": calls}
    text = draw(texts)
    if text is not None:
        message["text"] = text
    observations = [
        {
            "role": "tool",
            "name": call["name"],
            "content": draw(st.text(max_size=5)),
            "is_error": draw(st.booleans()),
            **({"id": call["id"]} if "id" in call else {}),
        }
        for call in calls
    ]
    return [message, *observations]


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    transcript: Transcript = [{"role": "user", "content": draw(st.sampled_from(["task", ""]))}]
    for step in draw(st.lists(steps(), max_size=6)):
        transcript += step
    if draw(st.booleans()):
        transcript.append({"role": "user", "content": "Your budget is spent."})
    return transcript


contexts = st.sampled_from(
    [None, last_steps(1), last_steps(2, note=False), compose(last_steps(3), cut_observations(2))]
)

OPENAI = OpenAIChat("gpt-4.1-mini", api_key="unused")
ANTHROPIC = AnthropicMessages("claude-haiku-4-5", api_key="unused")


def check_openai(messages: list[dict[str, Any]]) -> None:
    """Chat Completions: each call's tool message follows its assistant message, in order."""
    waiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert waiting and message["tool_call_id"] == waiting.pop(0)
            continue
        assert not waiting, "a call without its tool message"
        if message["role"] == "assistant" and "tool_calls" in message:
            waiting = [call["id"] for call in message["tool_calls"]]
            assert len(set(waiting)) == len(waiting)
            for call in message["tool_calls"]:
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
        else:
            assert isinstance(message["content"], str)
    assert not waiting


def check_anthropic(messages: list[dict[str, Any]]) -> None:
    """Messages: roles alternate from user, tool results open the turn after their calls."""
    assert messages[0]["role"] == "user"
    calls: list[str] = []
    for i, message in enumerate(messages):
        if i:
            assert message["role"] != messages[i - 1]["role"]
        blocks = message["content"]
        assert blocks
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        assert results == calls, "tool results must answer the previous turn's calls, first"
        assert [b["type"] for b in blocks[: len(results)]] == ["tool_result"] * len(results)
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        assert all(b["text"] for b in blocks if b["type"] == "text")
    assert calls == []


@given(transcripts(), contexts)
def test_every_transcript_makes_requests_the_apis_accept(
    transcript: Transcript, context: Any
) -> None:
    before = copy.deepcopy(transcript)
    shown = transcript if context is None else context(transcript)
    openai_request = OPENAI.request(shown)
    anthropic_request = ANTHROPIC.request(shown)
    check_openai(openai_request["messages"])
    check_anthropic(anthropic_request["messages"])
    assert transcript == before
    # A transcript rebuilt from the journal (plain JSON) makes the very same requests.
    rebuilt = json.loads(json.dumps(shown))
    assert json.dumps(OPENAI.request(rebuilt)) == json.dumps(openai_request)
    assert json.dumps(ANTHROPIC.request(rebuilt)) == json.dumps(anthropic_request)


def test_ids_are_derived_from_position_when_the_transcript_has_none() -> None:
    turns = read_transcript(
        [
            TASK,
            {"role": "assistant", "tool": "a", "args": {}},
            {"role": "tool", "name": "a", "content": "1", "is_error": False},
            {"role": "assistant", "calls": [{"name": "b", "args": {}}, {"name": "c", "args": {}}]},
            {"role": "tool", "name": "b", "content": "2", "is_error": False},
            {"role": "tool", "name": "c", "content": "3", "is_error": True},
        ]
    )
    a, b, c = Call("call_1_0", "a", {}), Call("call_2_0", "b", {}), Call("call_2_1", "c", {})
    assert turns == [
        Text("user", "task"),
        Calls((a,)),
        Result(a, "1", False),
        Calls((b, c)),
        Result(b, "2", False),
        Result(c, "3", True),
    ]


def test_observations_answer_their_call_by_id_in_any_order() -> None:
    turns = read_transcript(
        [
            TASK,
            {
                "role": "assistant",
                "calls": [
                    {"id": "x", "name": "b", "args": {}},
                    {"id": "y", "name": "c", "args": {}},
                ],
            },
            {"role": "tool", "name": "c", "content": "3", "is_error": False, "id": "y"},
            {"role": "tool", "name": "b", "content": "2", "is_error": False, "id": "x"},
        ]
    )
    assert [(t.call.id, t.content) for t in turns if isinstance(t, Result)] == [
        ("y", "3"),
        ("x", "2"),
    ]


def test_a_call_left_without_an_observation_gets_an_error_result() -> None:
    turns = read_transcript(
        [
            TASK,
            {"role": "assistant", "tool": "a", "args": {}},
            {"role": "user", "content": "note"},
        ]
    )
    assert turns[2] == Result(Call("call_1_0", "a", {}), NO_RESULT, True)
    assert turns[3] == Text("user", "note")


def test_answers_that_are_not_text_are_sent_as_json() -> None:
    final = {"role": "assistant", "content": {"answer": [1, 2.5], "ok": True}}
    assert read_transcript([TASK, final])[1] == Text(
        "assistant", '{"answer": [1, 2.5], "ok": true}'
    )


@pytest.mark.parametrize(
    "message",
    [
        {"role": "system", "content": "x"},
        {"content": "x"},
        {"role": "assistant", "tool": 3, "args": {}},
    ],
)
def test_a_message_the_loop_never_makes_is_a_fatal_model_error(message: dict[str, Any]) -> None:
    with pytest.raises(ModelFatal, match="transcript message 1"):
        read_transcript([TASK, message])
