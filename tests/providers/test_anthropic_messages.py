"""AnthropicMessages: the real `anthropic` SDK against a local server speaking Messages."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, MissingExtra, run_agent
from runner.models import AnthropicMessages, Price
from tests.providers.conftest import KEY
from tests.providers.fake_servers import (
    FakeServer,
    anthropic_error,
    anthropic_message,
    text_block,
    tool_use,
)
from tests.providers.test_openai_chat import TOOLS, TRANSCRIPT, WRAP_UP

MODEL = "claude-haiku-4-5"

EXPECTED_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "What is (2 + 3) * 7?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Add."},
            {"type": "tool_use", "id": "call_abc", "name": "add", "input": {"a": 2, "b": 3}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "call_abc", "content": "5"}],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call_2_0", "name": "multiply", "input": {"b": 7, "a": 5}}
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_2_0",
                "content": "OverflowError: big",
                "is_error": True,
            }
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "[unusable output: 'not a dict']"}]},
    {"role": "user", "content": [{"type": "text", "text": "InvalidAction: not a dict"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Both at once."},
            {"type": "tool_use", "id": "call_x", "name": "add", "input": {"a": 1, "b": 1}},
            {"type": "tool_use", "id": "call_4_1", "name": "multiply", "input": {"a": 2, "b": 2}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_x", "content": "2"},
            {"type": "tool_result", "tool_use_id": "call_4_1", "content": "4"},
            {"type": "text", "text": WRAP_UP},
        ],
    },
]

NUMBERS = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
TOOL_SCHEMAS = [
    {
        "name": name,
        "description": f"{verb} two numbers.",
        "input_schema": {**NUMBERS, "required": ["a", "b"], "additionalProperties": False},
    }
    for name, verb in (("add", "Add"), ("multiply", "Multiply"))
]


@pytest.fixture
def adapters() -> Iterator[list[AnthropicMessages]]:
    made: list[AnthropicMessages] = []
    yield made
    for adapter in made:
        adapter.close()


@pytest.fixture
def claude(server: FakeServer, adapters: list[AnthropicMessages]) -> AnthropicMessages:
    adapter = AnthropicMessages(
        MODEL, base_url=server.url, api_key=KEY, price=Price(1.0, 5.0, 0.1, 1.25)
    )
    adapters.append(adapter)
    return adapter


def wire(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_a_whole_transcript_is_sent_byte_for_byte(
    server: FakeServer, adapters: list[AnthropicMessages]
) -> None:
    server.reply(anthropic_message(text_block("35")))
    adapter = AnthropicMessages(
        MODEL,
        base_url=server.url,
        api_key=KEY,
        system="You are a calculator.",
        max_tokens=512,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    model = Agent(adapter, TOOLS).model
    assert isinstance(model, AnthropicMessages)
    adapters.append(model)
    action = model(TRANSCRIPT)
    assert action["type"] == "final" and action["content"] == "35"
    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert request.body == wire(
        {
            "max_tokens": 512,
            "messages": EXPECTED_MESSAGES,
            "model": MODEL,
            "system": "You are a calculator.",
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "tools": TOOL_SCHEMAS,
        }
    )


def test_empty_texts_are_sent_as_a_placeholder_the_api_accepts(
    server: FakeServer, claude: AnthropicMessages
) -> None:
    server.reply(anthropic_message(text_block("ok")))
    claude(
        [
            {"role": "user", "content": ""},
            {"role": "assistant", "tool": "add", "args": {}},
            {"role": "tool", "name": "add", "content": "", "is_error": False},
        ]
    )
    assert server.bodies[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "(empty)"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_1_0", "name": "add", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1_0"}]},
    ]


def test_text_and_one_call_is_the_single_call_form(
    server: FakeServer, claude: AnthropicMessages
) -> None:
    server.reply(
        anthropic_message(
            text_block("I'll add."),
            tool_use("toolu_01", "add", {"a": 2, "b": 3}),
            usage=(100, 20, 300, 50),
        )
    )
    action = claude([{"role": "user", "content": "2 + 3?"}])
    assert action == {
        "type": "tool",
        "name": "add",
        "args": {"a": 2, "b": 3},
        "id": "toolu_01",
        "text": "I'll add.",
        "usage": {
            "input_tokens": 450,
            "output_tokens": 20,
            "cached_tokens": 300,
            "cost": pytest.approx((100 * 1.0 + 300 * 0.1 + 50 * 1.25 + 20 * 5.0) / 1e6),
            "cost_known": True,
        },
    }


def test_parallel_calls_are_the_calls_form(server: FakeServer, claude: AnthropicMessages) -> None:
    server.reply(
        anthropic_message(tool_use("toolu_1", "add", {"a": 1}), tool_use("toolu_2", "multiply", {}))
    )
    action = claude([{"role": "user", "content": "go"}])
    assert action["calls"] == [
        {"id": "toolu_1", "name": "add", "args": {"a": 1}},
        {"id": "toolu_2", "name": "multiply", "args": {}},
    ]


def test_a_run_sends_tool_errors_flagged(server: FakeServer, claude: AnthropicMessages) -> None:
    server.reply(anthropic_message(tool_use("toolu_1", "divide", {"a": 1, "b": 0})))
    server.reply(anthropic_message(text_block("cannot divide by zero")))

    def divide(a: float, b: float) -> float:
        return a / b

    result = run_agent(claude, {"divide": divide}, "1 / 0?")
    assert (result.stop_reason, result.output) == ("final", "cannot divide by zero")
    assert server.bodies[1]["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",  # the provider's own id, kept by the loop
                "content": "ZeroDivisionError: division by zero",
                "is_error": True,
            }
        ],
    }
    assert server.bodies[0]["tools"][0]["input_schema"]["required"] == ["a", "b"]


def test_overload_is_retried_after_the_wait_the_provider_asked_for(
    server: FakeServer, claude: AnthropicMessages, waits: list[float]
) -> None:
    server.reply(
        anthropic_error("Overloaded", "overloaded_error"), status=529, headers={"retry-after": "4"}
    )
    server.reply(anthropic_error("Rate limited", "rate_limit_error"), status=429)
    server.reply(anthropic_message(text_block("done")))
    result = run_agent(claude, {}, "task", model_retries=2, retry_backoff=0.5)
    assert result.output == "done"
    assert waits == [4.0, 1.0]
    assert len(server.requests) == 3
    assert {r.headers["x-stainless-retry-count"] for r in server.requests} == {"0"}


def test_an_authentication_error_stops_at_once_without_the_key(
    server: FakeServer, claude: AnthropicMessages, waits: list[float]
) -> None:
    server.reply(anthropic_error(f"invalid x-api-key {KEY}", "authentication_error"), status=401)
    result = run_agent(claude, {}, "task", model_retries=4)
    assert result.stop_reason == "model_error"
    assert result.error == "ModelFatal: anthropic API error 401: invalid x-api-key [redacted]"
    assert len(server.requests) == 1 and waits == []


def test_a_bad_request_stops_at_once(server: FakeServer, claude: AnthropicMessages) -> None:
    server.reply(
        anthropic_error("messages: roles must alternate", "invalid_request_error"), status=400
    )
    result = run_agent(claude, {}, "task")
    assert result.error == "ModelFatal: anthropic API error 400: messages: roles must alternate"
    assert len(server.requests) == 1


def test_malformed_json_is_retried_then_stops(
    server: FakeServer, claude: AnthropicMessages, waits: list[float]
) -> None:
    server.reply(b"<html>502 Bad Gateway</html>").reply(b"").reply(b'{"content": [')
    result = run_agent(claude, {}, "task", model_retries=2, retry_backoff=0)
    assert result.stop_reason == "model_error"
    assert (result.error or "").startswith("ModelRetryable: anthropic API returned malformed JSON")
    assert len(server.requests) == 3


def test_a_refusal_is_an_error_observation(server: FakeServer, claude: AnthropicMessages) -> None:
    server.reply(anthropic_message(text_block("I won't do that."), stop_reason="refusal"))
    server.reply(anthropic_message(text_block("Here is what I can do.")))
    result = run_agent(claude, {}, "task")
    assert result.output == "Here is what I can do."
    assert result.transcript[2]["content"] == "InvalidAction: the model refused: I won't do that."
    assert server.bodies[1]["messages"][2] == {
        "role": "user",
        "content": [{"type": "text", "text": "InvalidAction: the model refused: I won't do that."}],
    }


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (anthropic_message(), "the model returned an empty response"),
        (anthropic_message(text_block("par"), stop_reason="max_tokens"), "cut off"),
        (anthropic_message(stop_reason="refusal"), "the model refused"),
        (
            anthropic_message({"type": "tool_use", "id": "t", "name": "add", "input": [1]}),
            "no name or input",
        ),
    ],
)
def test_responses_that_are_no_action_are_shown_to_the_model(
    server: FakeServer, claude: AnthropicMessages, message: dict[str, Any], error: str
) -> None:
    server.reply(message)
    action = claude([{"role": "user", "content": "task"}])
    assert action["type"] == "invalid" and error in action["error"]


def test_max_tokens_must_be_a_positive_count() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        AnthropicMessages(MODEL, max_tokens=0)


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(MissingExtra, match=r"pip install 'durable-runner\[anthropic\]'"):
        AnthropicMessages(MODEL)
