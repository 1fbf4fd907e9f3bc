"""`stream=True`: each adapter through its SDK's streaming API, against a local server that
sends the provider's server-sent events. The streamed response is the same action (the same
usage, the same cost) as the same response unstreamed, and its pieces reach the call's
delta stream as they come."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from runner.core.deltas import Delta, streaming
from runner.errors import ModelRetryable
from runner.models import AnthropicMessages, OpenAIChat
from runner.models.adapter import Adapter
from tests.providers.conftest import KEY
from tests.providers.fake_servers import (
    FakeServer,
    anthropic_message,
    openai_completion,
    text_block,
    tool_use,
)
from tests.providers.fake_streams import anthropic_events, openai_events

TRANSCRIPT = [{"role": "user", "content": "What is (2 + 3) * 7?"}]

OPENAI_BODIES = {
    "text": openai_completion("The answer is 35, as (2 + 3) * 7 = 35.", usage=(120, 17, 64)),
    "calls": openai_completion(
        "Both at once.",
        calls=[("call_1", "add", '{"a": 2, "b": 3}'), ("call_2", "multiply", '{"a": 5, "b": 7}')],
    ),
    "one call": openai_completion(calls=[("call_1", "add", '{"a": 2, "b": 3}')]),
    "refusal": openai_completion(refusal="I cannot help with that."),
    "cut off": openai_completion("The answer is", finish_reason="length"),
    "bad arguments": openai_completion(calls=[("call_1", "add", '{"a": 2,')]),
    "empty": openai_completion(""),
}

ANTHROPIC_BODIES = {
    "text": anthropic_message(text_block("The answer is 35."), usage=(100, 20, 30, 7)),
    "calls": anthropic_message(
        text_block("Both at once."),
        tool_use("toolu_1", "add", {"a": 2, "b": 3}),
        tool_use("toolu_2", "multiply", {"a": 5, "b": 7}),
    ),
    "no arguments": anthropic_message(tool_use("toolu_1", "now", {})),
    "refusal": anthropic_message(text_block("No."), stop_reason="refusal"),
    "cut off": anthropic_message(text_block("The answer"), stop_reason="max_tokens"),
    "empty": anthropic_message(),
}

Events = Callable[[dict[str, Any]], list[bytes]]


def _openai(server: FakeServer, stream: bool) -> Adapter:
    return OpenAIChat(
        "gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY, price=(0.4, 1.6), stream=stream
    )


def _anthropic(server: FakeServer, stream: bool) -> Adapter:
    return AnthropicMessages(
        "claude-haiku-4-5", base_url=server.url, api_key=KEY, price=(1.0, 5.0), stream=stream
    )


CASES = [("openai", name, body) for name, body in OPENAI_BODIES.items()] + [
    ("anthropic", name, body) for name, body in ANTHROPIC_BODIES.items()
]
MAKERS: dict[str, tuple[Callable[[FakeServer, bool], Adapter], Events]] = {
    "openai": (_openai, openai_events),
    "anthropic": (_anthropic, anthropic_events),
}


class Sink:
    def __init__(self) -> None:
        self.deltas: list[Delta] = []

    def delta(self, delta: Delta) -> None:
        self.deltas.append(delta)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize(
    ("provider", "body"), [(p, b) for p, _, b in CASES], ids=[f"{p}-{n}" for p, n, _ in CASES]
)
def test_a_streamed_response_is_the_same_action_as_the_whole_one(
    server: FakeServer, provider: str, body: dict[str, Any]
) -> None:
    make, events = MAKERS[provider]
    server.reply(body)
    server.stream(events(body))
    whole = make(server, False)(TRANSCRIPT)
    sink = Sink()
    with streaming(sink, 1):
        streamed = make(server, True)(TRANSCRIPT)
    assert streamed == whole
    plain, asked = server.bodies
    assert "stream" not in plain and asked["stream"] is True
    assert {k: v for k, v in asked.items() if not k.startswith("stream")} == plain
    if provider == "openai":
        assert asked["stream_options"] == {"include_usage": True}  # the usage, as unstreamed
    assert [d.ordinal for d in sink.deltas] == list(range(len(sink.deltas)))


def test_the_pieces_are_the_text_and_each_call_s_arguments(server: FakeServer) -> None:
    body = OPENAI_BODIES["calls"]
    server.stream(openai_events(body, size=3))
    sink = Sink()
    with streaming(sink, 4):
        action = _openai(server, True)(TRANSCRIPT)
    assert all(d.step == 4 for d in sink.deltas)
    text = "".join(d.text for d in sink.deltas if d.part == "text")
    assert text == action["text"] == "Both at once."
    for n, call in enumerate(body["choices"][0]["message"]["tool_calls"]):
        pieces = [d for d in sink.deltas if d.part == "arguments" and d.call == n]
        assert len(pieces) > 1 and {d.tool for d in pieces} == {call["function"]["name"]}
        assert "".join(d.text for d in pieces) == call["function"]["arguments"]


def test_anthropic_pieces_number_the_tool_calls_from_zero(server: FakeServer) -> None:
    body = ANTHROPIC_BODIES["calls"]
    server.stream(anthropic_events(body, size=3))
    sink = Sink()
    with streaming(sink, 1):
        _anthropic(server, True)(TRANSCRIPT)
    assert "".join(d.text for d in sink.deltas if d.part == "text") == "Both at once."
    calls = {(d.call, d.tool) for d in sink.deltas if d.part == "arguments"}
    assert calls == {(0, "add"), (1, "multiply")}
    first = "".join(d.text for d in sink.deltas if d.part == "arguments" and d.call == 0)
    assert first == '{"a": 2, "b": 3}'


def test_a_stream_nobody_follows_still_answers(server: FakeServer) -> None:
    server.stream(anthropic_events(ANTHROPIC_BODIES["text"]))
    assert _anthropic(server, True)(TRANSCRIPT)["content"] == "The answer is 35."


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_error_in_the_middle_of_a_stream_is_retried(server: FakeServer, provider: str) -> None:
    make, events = MAKERS[provider]
    body = OPENAI_BODIES["text"] if provider == "openai" else ANTHROPIC_BODIES["text"]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    head = "event: error\n" if provider == "anthropic" else ""
    broken = [*events(body)[:3], f"{head}data: {json.dumps(error)}\n\n".encode()]
    server.stream(broken)
    with pytest.raises(ModelRetryable, match="Overloaded"):
        make(server, True)(TRANSCRIPT)
