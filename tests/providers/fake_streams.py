"""Provider responses as the server-sent events their streaming APIs send.

Each function takes the body a call answers unstreamed (fake_servers' `openai_completion`,
`anthropic_message`) and cuts it into the events the same call sends with `stream=True`,
its text and each tool call's arguments in pieces of `size` characters, so a test can ask
that both ways give the same action.
"""

from __future__ import annotations

import json
from typing import Any


def _cut(text: str, size: int) -> list[str]:
    return [text[at : at + size] for at in range(0, len(text), size)] or []


def _data(value: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(value)}\n\n".encode()


def openai_events(body: dict[str, Any], size: int = 4) -> list[bytes]:
    """A chat.completion body as chat.completion.chunk events, ending with the usage."""
    head = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        one = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data(head | {"choices": [one], "usage": None})

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in _cut(message.get("content") or "", size)]
    events += [chunk({"refusal": piece}) for piece in _cut(message.get("refusal") or "", size)]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        start = {"index": index, "id": call["id"], "type": "function"}
        events.append(
            chunk(
                {"tool_calls": [start | {"function": {"name": function["name"], "arguments": ""}}]}
            )
        )
        for piece in _cut(function["arguments"], size):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    events.append(chunk({}, choice["finish_reason"]))
    events.append(_data(head | {"choices": [], "usage": body["usage"]}))
    events.append(b"data: [DONE]\n\n")
    return events


def anthropic_events(body: dict[str, Any], size: int = 4) -> list[bytes]:
    """A message body as the Messages API's stream events."""
    usage = body["usage"]
    start = body | {
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage | {"output_tokens": 1},
    }
    events = [_data({"type": "message_start", "message": start}, "message_start")]
    events.append(_data({"type": "ping"}, "ping"))
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            opened: dict[str, Any] = {"type": "text", "text": ""}
            pieces = [{"type": "text_delta", "text": p} for p in _cut(block["text"], size)]
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            arguments = json.dumps(block["input"])
            pieces = [
                {"type": "input_json_delta", "partial_json": p} for p in _cut(arguments, size)
            ]
        events.append(
            _data(
                {"type": "content_block_start", "index": index, "content_block": opened},
                "content_block_start",
            )
        )
        for delta in pieces:
            events.append(
                _data(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
            )
        events.append(_data({"type": "content_block_stop", "index": index}, "content_block_stop"))
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]}
    events.append(
        _data(
            {
                "type": "message_delta",
                "delta": delta,
                "usage": {"output_tokens": usage["output_tokens"]},
            },
            "message_delta",
        )
    )
    events.append(_data({"type": "message_stop"}, "message_stop"))
    return events
