"""Streamed responses assembled into the bodies a response that does not stream has.

A streaming adapter reads the SDK's events one by one, hands each piece of text or of a tool
call's arguments to the run's followers, and gives every event to an assembler here; at the
end the assembler's `body()` is the JSON object the provider would have answered without
streaming, which the adapter's `reply` reads as it reads that one: the same action, the
same usage, the same journal row, whichever way the response came.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from runner.core.deltas import DeltaPart


@dataclass(frozen=True, slots=True)
class Piece:
    """A piece of the response to show followers (see runner.core.deltas.Delta)."""

    text: str
    part: DeltaPart = "text"
    call: int = 0
    tool: str | None = None


class Assembler(Protocol):
    def add(self, event: dict[str, Any]) -> list[Piece]:
        """Take one event of the stream; the pieces of the response it carries."""
        ...

    def body(self) -> dict[str, Any]:
        """The response as one body, as the provider answers a call that does not stream."""
        ...


class ChatChunks:
    """Chat Completions chunks (`chat.completion.chunk`) as one `chat.completion`."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: Any = None
        self.usage: Any = None
        self.answered = False  # a chunk of the first choice came

    def add(self, event: dict[str, Any]) -> list[Piece]:
        for key in ("id", "model", "created", "system_fingerprint"):
            if event.get(key) is not None:
                self.fields[key] = event[key]
        if event.get("usage"):  # the last chunk, with stream_options.include_usage
            self.usage = event["usage"]
        pieces: list[Piece] = []
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # one choice is asked for; a server that sends more: the first
            self.answered = True
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.content.append(text)
                pieces.append(Piece(text))
            refusal = delta.get("refusal")
            if isinstance(refusal, str):
                self.refusal.append(refusal)
            for raw in delta.get("tool_calls") or []:
                pieces += self._call_piece(raw)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        return pieces

    def _call_piece(self, raw: Any) -> list[Piece]:
        if not isinstance(raw, dict):
            return []
        index = raw.get("index")
        index = index if isinstance(index, int) else len(self.calls)
        call = self.calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if raw.get("id"):
            call["id"] = raw["id"]
        if raw.get("type"):
            call["type"] = raw["type"]
        function = raw.get("function") or {}
        # String fields arrive in pieces (as the SDK's own accumulator joins them).
        if isinstance(function.get("name"), str):
            call["function"]["name"] += function["name"]
        arguments = function.get("arguments")
        if not isinstance(arguments, str) or not arguments:
            return []
        call["function"]["arguments"] += arguments
        return [Piece(arguments, "arguments", index, call["function"]["name"] or None)]

    def body(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content) if self.content else None,
            "refusal": "".join(self.refusal) or None,
        }
        if self.calls:
            message["tool_calls"] = [self.calls[index] for index in sorted(self.calls)]
        choices = (
            [{"index": 0, "message": message, "finish_reason": self.finish_reason}]
            if self.answered
            else []
        )
        return {**self.fields, "object": "chat.completion", "choices": choices, "usage": self.usage}


class MessageEvents:
    """Messages API stream events (`message_start` ... `message_stop`) as one message."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}  # a tool_use block's input, as JSON text so far
        self.tool_calls: dict[int, int] = {}  # a tool_use block's index among the calls

    def add(self, event: dict[str, Any]) -> list[Piece]:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self.message = dict(event["message"])
            self.message["usage"] = dict(self.message.get("usage") or {})
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            index = event.get("index", len(self.blocks))
            block = dict(event["content_block"])
            self.blocks[index] = block
            if block.get("type") == "tool_use":
                self.json[index] = []
                self.tool_calls[index] = len(self.tool_calls)
            elif block.get("type") == "text" and block.get("text"):
                return [Piece(block["text"])]
        elif kind == "content_block_delta":
            return self._delta(event.get("index", 0), event.get("delta") or {})
        elif kind == "content_block_stop":
            self._stop(event.get("index", 0))
        elif kind == "message_delta" and self.message is not None:
            delta = event.get("delta") or {}
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    self.message[key] = delta[key]
            usage = event.get("usage") or {}
            # The counts so far: each one given replaces the one message_start gave.
            self.message["usage"].update({k: v for k, v in usage.items() if v is not None})
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[Piece]:
        block = self.blocks.get(index)
        if block is None:
            return []
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = block.get("text", "") + delta["text"]
            return [Piece(delta["text"])]
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self.json.setdefault(index, []).append(delta["partial_json"])
            name = block.get("name")
            return [
                Piece(
                    delta["partial_json"],
                    "arguments",
                    self.tool_calls.get(index, 0),
                    name if isinstance(name, str) else None,
                )
            ]
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block["signature"] = delta["signature"]
        return []

    def _stop(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is None or block.get("type") != "tool_use":
            return
        text = "".join(self.json.get(index, []))
        try:
            block["input"] = json.loads(text) if text else {}
        except json.JSONDecodeError:
            block["input"] = None  # read as a block with no input: an invalid action

    def body(self) -> dict[str, Any]:
        if self.message is None:
            return {"type": "error", "error": {"message": "the stream had no message_start"}}
        return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}
