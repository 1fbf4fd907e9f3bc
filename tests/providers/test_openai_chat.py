"""OpenAIChat: the real `openai` SDK against a local server speaking Chat Completions."""

from __future__ import annotations

import json
import logging
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, MissingExtra, run_agent, tool
from runner.models import OpenAIChat, Price
from tests.providers.conftest import KEY
from tests.providers.fake_servers import FakeServer, openai_completion, openai_error

WRAP_UP = "Your max_steps budget is spent. Answer now."

# Everything the loop can put in a transcript: ids given and missing, text beside calls,
# a failed call, malformed output and its error, a step of two calls, a wrap-up note.
TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "user", "content": "What is (2 + 3) * 7?"},
    {
        "role": "assistant",
        "tool": "add",
        "args": {"a": 2, "b": 3},
        "id": "call_abc",
        "text": "Add.",
    },
    {"role": "tool", "name": "add", "content": "5", "is_error": False, "id": "call_abc"},
    {"role": "assistant", "tool": "multiply", "args": {"b": 7, "a": 5}},
    {"role": "tool", "name": "multiply", "content": "OverflowError: big", "is_error": True},
    {"role": "assistant", "invalid": "'not a dict'"},
    {"role": "tool", "name": None, "content": "InvalidAction: not a dict", "is_error": True},
    {
        "role": "assistant",
        "calls": [
            {"id": "call_x", "name": "add", "args": {"a": 1, "b": 1}},
            {"name": "multiply", "args": {"a": 2, "b": 2}},
        ],
        "text": "Both at once.",
    },
    {"role": "tool", "name": "add", "content": "2", "is_error": False, "id": "call_x"},
    {"role": "tool", "name": "multiply", "content": "4", "is_error": False},
    {"role": "user", "content": WRAP_UP},
]

EXPECTED_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a calculator."},
    {"role": "user", "content": "What is (2 + 3) * 7?"},
    {
        "role": "assistant",
        "content": "Add.",
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_abc", "content": "5"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_2_0",
                "type": "function",
                "function": {"name": "multiply", "arguments": '{"a": 5, "b": 7}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_2_0", "content": "OverflowError: big"},
    {"role": "assistant", "content": "[unusable output: 'not a dict']"},
    {"role": "user", "content": "InvalidAction: not a dict"},
    {
        "role": "assistant",
        "content": "Both at once.",
        "tool_calls": [
            {
                "id": "call_x",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'},
            },
            {
                "id": "call_4_1",
                "type": "function",
                "function": {"name": "multiply", "arguments": '{"a": 2, "b": 2}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_x", "content": "2"},
    {"role": "tool", "tool_call_id": "call_4_1", "content": "4"},
    {"role": "user", "content": WRAP_UP},
]


@tool(idempotent=True)
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool(idempotent=True)
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


TOOLS = {"add": add, "multiply": multiply}
NUMBERS = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{verb} two numbers.",
            "parameters": {**NUMBERS, "required": ["a", "b"], "additionalProperties": False},
        },
    }
    for name, verb in (("add", "Add"), ("multiply", "Multiply"))
]


@pytest.fixture
def adapters() -> Iterator[list[OpenAIChat]]:
    """Adapters a test makes, closed after it (their pooled sockets with them)."""
    made: list[OpenAIChat] = []
    yield made
    for adapter in made:
        adapter.close()


@pytest.fixture
def chat(server: FakeServer, adapters: list[OpenAIChat]) -> OpenAIChat:
    adapter = OpenAIChat(
        "gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY, price=Price(0.4, 1.6, 0.1)
    )
    adapters.append(adapter)
    return adapter


def bound(adapter: OpenAIChat, adapters: list[OpenAIChat]) -> OpenAIChat:
    agent_model = Agent(adapter, TOOLS).model
    assert isinstance(agent_model, OpenAIChat)
    adapters.append(agent_model)
    return agent_model


def wire(body: dict[str, Any]) -> bytes:
    """JSON as the SDK puts it on the wire."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_a_whole_transcript_is_sent_byte_for_byte(
    server: FakeServer, adapters: list[OpenAIChat]
) -> None:
    server.reply(openai_completion("35"))
    adapter = OpenAIChat(
        "gpt-4.1-mini",
        base_url=f"{server.url}/v1",
        api_key=KEY,
        system="You are a calculator.",
        temperature=0,
        parallel_tool_calls=False,
    )
    model = bound(adapter, adapters)
    action = model(TRANSCRIPT)
    assert action["type"] == "final" and action["content"] == "35"
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    # The SDK orders the body's fields as its create() declares them.
    assert request.body == wire(
        {
            "messages": EXPECTED_MESSAGES,
            "model": "gpt-4.1-mini",
            "parallel_tool_calls": False,
            "temperature": 0,
            "tools": TOOL_SCHEMAS,
        }
    )
    assert model.request(TRANSCRIPT) == model.request(json.loads(json.dumps(TRANSCRIPT)))


def test_one_call_is_the_single_call_form_with_its_provider_id_and_text(
    server: FakeServer, chat: OpenAIChat
) -> None:
    server.reply(openai_completion("Let me add.", calls=[("call_9", "add", '{"b": 3, "a": 2}')]))
    action = chat([{"role": "user", "content": "2 + 3?"}])
    assert action == {
        "type": "tool",
        "name": "add",
        "args": {"b": 3, "a": 2},
        "id": "call_9",
        "text": "Let me add.",
        "usage": {"input_tokens": 100, "output_tokens": 20, "cost": 7.2e-05, "cost_known": True},
    }


def test_parallel_calls_are_the_calls_form(server: FakeServer, chat: OpenAIChat) -> None:
    server.reply(
        openai_completion(
            calls=[("call_1", "add", '{"a": 1, "b": 2}'), ("call_2", "multiply", "{}")],
            usage=(1000, 100, 400),
        )
    )
    action = chat([{"role": "user", "content": "go"}])
    assert action["calls"] == [
        {"id": "call_1", "name": "add", "args": {"a": 1, "b": 2}},
        {"id": "call_2", "name": "multiply", "args": {}},
    ]
    assert "text" not in action and "name" not in action
    # 600 plain input tokens at 0.4, 400 cached at 0.1, 100 output at 1.6 (per million).
    assert action["usage"] == {
        "input_tokens": 1000,
        "output_tokens": 100,
        "cached_tokens": 400,
        "cost": pytest.approx((600 * 0.4 + 400 * 0.1 + 100 * 1.6) / 1e6),
        "cost_known": True,
    }


def test_a_run_to_a_final_answer_counts_tokens_and_cost(
    server: FakeServer, chat: OpenAIChat
) -> None:
    server.reply(openai_completion(calls=[("call_a", "add", '{"a": 2, "b": 3}')]))
    server.reply(openai_completion("5", usage=(200, 10, 0)))
    result = run_agent(chat, TOOLS, "2 + 3?")
    assert (result.stop_reason, result.output, result.steps) == ("final", "5", 2)
    assert result.tokens == 120 + 210
    assert result.cost == pytest.approx((100 * 0.4 + 20 * 1.6 + 200 * 0.4 + 10 * 1.6) / 1e6)
    assert server.bodies[1]["tools"] == TOOL_SCHEMAS  # run_agent hands the adapter its tools
    assert server.bodies[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_a",  # the provider's own id, kept by the loop
        "content": "5",
    }


def test_an_unknown_price_costs_zero_and_says_so(
    server: FakeServer, adapters: list[OpenAIChat], caplog: pytest.LogCaptureFixture
) -> None:
    adapter = OpenAIChat("llama3.2", base_url=f"{server.url}/v1", api_key=KEY)
    adapters.append(adapter)
    server.reply(openai_completion("hi", model="llama3.2")).reply(
        openai_completion("hi", model="llama3.2")
    )
    with caplog.at_level(logging.WARNING, logger="runner.models"):
        first = adapter([{"role": "user", "content": "hello"}])
        second = adapter([{"role": "user", "content": "hello"}])
    assert first["usage"]["cost"] == 0.0 and first["usage"]["cost_known"] is False
    assert second["usage"] == first["usage"]
    warned = [r.getMessage() for r in caplog.records if r.name == "runner.models"]
    assert len(warned) == 1 and "llama3.2" in warned[0] and "price=" in warned[0]


def test_a_rate_limit_is_retried_after_the_wait_the_provider_asked_for(
    server: FakeServer, chat: OpenAIChat, waits: list[float]
) -> None:
    server.reply(
        openai_error("Rate limit reached", "requests", "rate_limit_exceeded"),
        status=429,
        headers={"retry-after": "7"},
    )
    server.reply(openai_completion("done"))
    result = run_agent(chat, {}, "task", model_retries=2, retry_backoff=0.5)
    assert (result.stop_reason, result.output) == ("final", "done")
    assert len(server.requests) == 2
    assert waits == [7.0]
    assert server.requests[0].body == server.requests[1].body


def test_retry_after_ms_is_read_too(
    server: FakeServer, chat: OpenAIChat, waits: list[float]
) -> None:
    server.reply(openai_error("slow", "requests"), status=429, headers={"retry-after-ms": "2500"})
    server.reply(openai_completion("done"))
    assert run_agent(chat, {}, "task", retry_backoff=0.5).output == "done"
    assert waits == [2.5]


def test_a_retry_after_longer_than_runner_waits_stops_the_run(
    server: FakeServer, chat: OpenAIChat, waits: list[float]
) -> None:
    server.reply(
        openai_error("quota", "insufficient_quota"), status=429, headers={"retry-after": "86400"}
    )
    result = run_agent(chat, {}, "task", model_retries=3)
    assert result.stop_reason == "model_error"
    assert "asks to wait 86400s" in (result.error or "")
    assert len(server.requests) == 1 and waits == []


def test_the_sdk_never_retries_by_itself(
    server: FakeServer, chat: OpenAIChat, waits: list[float]
) -> None:
    server.reply(openai_error("boom", "server_error"), status=500)
    result = run_agent(chat, {}, "task", model_retries=0)
    assert result.stop_reason == "model_error"
    assert result.error == "ModelRetryable: openai API error 500: boom"
    assert len(server.requests) == 1
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"


def test_server_errors_are_retried_with_the_loops_backoff(
    server: FakeServer, chat: OpenAIChat, waits: list[float]
) -> None:
    server.reply(openai_error("boom", "server_error"), status=500)
    server.reply(openai_error("bad gateway", "server_error"), status=502)
    server.reply(openai_completion("done"))
    result = run_agent(chat, {}, "task", model_retries=2, retry_backoff=0.25)
    assert result.output == "done"
    assert waits == [0.25, 0.5]
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, "invalid_request_error"),
        (403, "permission_denied"),
        (400, "invalid_request_error"),
        (404, "not_found"),
    ],
)
def test_client_errors_stop_the_run_at_once_without_the_key(
    server: FakeServer, chat: OpenAIChat, waits: list[float], status: int, kind: str
) -> None:
    message = f"Incorrect API key provided: {KEY}. Find your key at https://example.invalid."
    server.reply(openai_error(message, kind, "invalid_api_key"), status=status)
    result = run_agent(chat, {}, "task", model_retries=5)
    assert result.stop_reason == "model_error"
    assert result.error == (
        f"ModelFatal: openai API error {status}: Incorrect API key provided: [redacted]. "
        "Find your key at https://example.invalid."
    )
    assert KEY not in repr(result) and "Bearer" not in repr(result)
    assert len(server.requests) == 1 and waits == []


def test_key_shaped_text_is_redacted_even_when_it_is_not_the_configured_key(
    server: FakeServer, chat: OpenAIChat
) -> None:
    server.reply(openai_error("Key sk-proj-AbC123xyz789 is revoked", "auth"), status=401)
    result = run_agent(chat, {}, "task")
    assert result.error == "ModelFatal: openai API error 401: Key sk-[redacted] is revoked"


def test_malformed_json_is_retried_then_stops_as_a_model_error(
    server: FakeServer, chat: OpenAIChat, waits: list[float]
) -> None:
    for _ in range(3):
        server.reply(b'{"choices": [{"message": ')
    result = run_agent(chat, {}, "task", model_retries=2, retry_backoff=0)
    assert result.stop_reason == "model_error"
    assert (result.error or "").startswith("ModelRetryable: openai API returned malformed JSON")
    assert len(server.requests) == 3


def test_an_error_body_with_status_200_is_retried(
    server: FakeServer, chat: OpenAIChat, waits: list[float]
) -> None:
    server.reply(openai_error("upstream overloaded", "server_error"))
    server.reply(openai_completion("done"))
    assert run_agent(chat, {}, "task", retry_backoff=0).output == "done"
    assert len(server.requests) == 2


def test_a_refusal_is_an_error_observation_the_model_sees(
    server: FakeServer, chat: OpenAIChat
) -> None:
    server.reply(openai_completion(refusal="I can't help with that."))
    server.reply(openai_completion("Sorry: here is a safe answer."))
    result = run_agent(chat, {}, "task")
    assert (result.stop_reason, result.output) == ("final", "Sorry: here is a safe answer.")
    error = result.transcript[2]
    assert error == {
        "role": "tool",
        "name": None,
        "content": "InvalidAction: the model refused: I can't help with that.",
        "is_error": True,
    }
    sent = server.bodies[1]["messages"]
    assert sent[1]["role"] == "assistant" and sent[1]["content"].startswith("[unusable output: ")
    assert sent[2] == {"role": "user", "content": error["content"]}
    assert result.tokens == 240  # the refusal's tokens were spent too


@pytest.mark.parametrize(
    ("completion", "error"),
    [
        (openai_completion(None), "the model returned an empty response"),
        (openai_completion(""), "the model returned an empty response"),
        (openai_completion("partial answ", finish_reason="length"), "cut off at its token limit"),
        (openai_completion(None, finish_reason="content_filter"), "content filter"),
        (
            openai_completion(calls=[("c", "add", '{"a": 1,')]),
            "the arguments given to add are not valid JSON",
        ),
        (openai_completion(calls=[("c", "add", "[1, 2]")]), "must be a JSON object"),
    ],
)
def test_responses_that_are_no_action_are_shown_to_the_model(
    server: FakeServer, chat: OpenAIChat, completion: dict[str, Any], error: str
) -> None:
    server.reply(completion)
    action = chat([{"role": "user", "content": "task"}])
    assert action["type"] == "invalid" and error in action["error"]
    assert action["usage"]["input_tokens"] == 100


def test_an_unreachable_server_is_retried(adapters: list[OpenAIChat], waits: list[float]) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    adapter = OpenAIChat("gpt-4.1-mini", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
    adapters.append(adapter)
    result = run_agent(adapter, {}, "task", model_retries=1, retry_backoff=0)
    assert result.stop_reason == "model_error"
    assert result.error == "ModelRetryable: openai API unreachable: Connection error."
    assert waits == [0]


def test_a_timeout_is_retried(
    server: FakeServer, adapters: list[OpenAIChat], waits: list[float]
) -> None:
    adapter = OpenAIChat("gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY, timeout=0.2)
    adapters.append(adapter)
    server.reply(openai_completion("too late"), delay=2.0)
    for _ in range(3):
        server.reply(openai_completion("done"))
    result = run_agent(adapter, {}, "task", model_retries=3, retry_backoff=0)
    assert (result.stop_reason, result.output) == ("final", "done")
    assert len(server.requests) >= 2 and waits[0] == 0
    assert server.bodies[0] == server.bodies[1]  # `timeout` is the client's, not the body's
    server.script.clear()
    server.reply(openai_completion("too late"), delay=2.0)
    failed = run_agent(adapter, {}, "task", model_retries=0)
    assert (failed.stop_reason, failed.error) == (
        "model_error",
        "ModelRetryable: openai API timed out",
    )


def test_a_missing_key_is_a_model_error_naming_the_variable(
    adapters: list[OpenAIChat], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    adapter = OpenAIChat("gpt-4.1-mini", base_url="http://127.0.0.1:9/v1")
    adapters.append(adapter)
    result = run_agent(adapter, {}, "task", model_retries=3)
    assert result.stop_reason == "model_error"
    assert "OPENAI_API_KEY" in (result.error or "")


def test_a_client_passed_in_is_used_with_its_retries_off(
    server: FakeServer, waits: list[float]
) -> None:
    import openai

    with openai.OpenAI(api_key=KEY, base_url=f"{server.url}/v1", max_retries=5) as client:
        adapter = OpenAIChat("gpt-4.1-mini", client=client)
        server.reply(openai_error("boom", "server_error"), status=503)
        result = run_agent(adapter, {}, "task", model_retries=0)
        assert result.stop_reason == "model_error" and len(server.requests) == 1
        adapter.close()  # leaves the caller's client open
        assert not client.is_closed()


def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingExtra, match=r"pip install 'durable-runner\[openai\]'"):
        OpenAIChat("gpt-4.1-mini")


def test_the_repr_shows_the_model_and_never_the_key(chat: OpenAIChat) -> None:
    assert repr(chat) == "OpenAIChat('gpt-4.1-mini')"
    assert KEY not in repr(vars(chat).get("request_params"))


def test_the_price_table_prices_the_model_whatever_the_host(
    server: FakeServer, adapters: list[OpenAIChat], caplog: pytest.LogCaptureFixture
) -> None:
    """A proxy in front of OpenAI (OPENAI_BASE_URL elsewhere) passes its list prices on:
    the model's cost is known; `price_table=False` says they do not apply to the host."""
    official = OpenAIChat("gpt-4.1-mini", api_key=KEY)  # api.openai.com: never called here
    proxied = OpenAIChat("gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY)
    local = OpenAIChat("gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY, price_table=False)
    adapters += [official, proxied, local]
    official._connect()
    priced = official.reply(openai_completion("hi", usage=(1000, 100, 0)))["usage"]
    assert priced["cost_known"] is True
    assert priced["cost"] == pytest.approx((1000 * 0.4 + 100 * 1.6) / 1e6)  # genai-prices
    server.reply(openai_completion("hi", usage=(1000, 100, 0)))
    server.reply(openai_completion("hi", usage=(1000, 100, 0)))
    with caplog.at_level(logging.WARNING, logger="runner.models"):
        assert proxied([{"role": "user", "content": "x"}])["usage"] == priced
        unpriced = local([{"role": "user", "content": "x"}])["usage"]
    assert unpriced["cost_known"] is False and unpriced["cost"] == 0.0
    (warned,) = [r.getMessage() for r in caplog.records if r.name == "runner.models"]
    assert "price_table=False" in warned and "gpt-4.1-mini" in warned
    assert "does not know" not in warned


def test_the_flag_is_a_yes_or_no() -> None:
    with pytest.raises(ValueError, match="price_table must be True or False"):
        OpenAIChat("gpt-4.1-mini", api_key=KEY, price_table="no")  # type: ignore[arg-type]
