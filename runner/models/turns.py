"""The loop's side of every adapter: its transcript read as turns, and actions written back.

Reading is a pure function of the transcript, so a resumed run (whose transcript is rebuilt
from the journal, provider call ids and the text beside calls included) sends exactly the
requests an uncrashed run sends. A call or observation without a provider id (a model of
one's own need give none) gets one derived from its position (`call_<step>_<n>`), and each
observation answers the earliest call of the step before it that is still unanswered.
An observation that answers no call (the error shown after malformed output) becomes a
user message; a call left without an observation gets an error result, so every request
is one the provider accepts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runner.errors import ModelFatal

NO_RESULT = "Error: no result was recorded for this call"


@dataclass(frozen=True)
class Call:
    """One tool call of the model, with the provider's id (or one derived from position)."""

    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Text:
    """Plain text from the user (task, notes, errors) or the model (answers)."""

    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True)
class Calls:
    """The model's tool calls of one step, and any text it gave beside them."""

    calls: tuple[Call, ...]
    text: str | None = None


@dataclass(frozen=True)
class Result:
    """A tool's observation, answering one call."""

    call: Call
    content: str
    is_error: bool


Turn = Text | Calls | Result


def read_transcript(transcript: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """The transcript as provider-neutral turns (ModelFatal on a message it cannot read)."""
    turns: list[Turn] = []
    pending: list[Call] = []  # the last step's calls that no observation answered yet
    step = 0

    def settle() -> None:
        turns.extend(Result(call, NO_RESULT, True) for call in pending)
        pending.clear()

    for position, message in enumerate(transcript):
        role = message.get("role")
        if role == "tool":
            call = _answered(pending, message.get("id"))
            content = _text(message.get("content"))
            if call is None:
                turns.append(Text("user", content))
            else:
                turns.append(Result(call, content, bool(message.get("is_error"))))
            continue
        settle()
        if role == "user":
            turns.append(Text("user", _text(message.get("content"))))
        elif role == "assistant":
            step += 1
            if "invalid" in message:
                turns.append(Text("assistant", f"[unusable output: {message['invalid']}]"))
            elif "calls" in message or "tool" in message:
                shape = message.get("calls", [message])
                calls = tuple(_call(step, n, c, position) for n, c in enumerate(shape))
                text = message.get("text")
                turns.append(Calls(calls, text if isinstance(text, str) and text else None))
                pending.extend(calls)
            else:
                turns.append(Text("assistant", _text(message.get("content"))))
        else:
            raise ModelFatal(f"transcript message {position} has no role the model knows: {role!r}")
    settle()
    return turns


def tool_action(
    calls: Sequence[Call], text: str | None, usage: Mapping[str, Any]
) -> dict[str, Any]:
    """The action for a response with tool calls: the single-call form for exactly one."""
    if len(calls) == 1:
        (call,) = calls
        action: dict[str, Any] = {"type": "tool", "name": call.name, "args": call.args}
        if call.id:
            action["id"] = call.id
    else:
        action = {
            "type": "tool",
            "calls": [{"id": c.id, "name": c.name, "args": c.args} for c in calls],
        }
    if text:
        action["text"] = text
    action["usage"] = dict(usage)
    return action


def final_action(text: str, usage: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "final", "content": text, "usage": dict(usage)}


def invalid_action(error: str, usage: Mapping[str, Any]) -> dict[str, Any]:
    """A response that is no action (a refusal, nothing at all): the model is shown `error`."""
    return {"type": "invalid", "error": error, "usage": dict(usage)}


def _answered(pending: list[Call], call_id: object) -> Call | None:
    for index, call in enumerate(pending):
        if call_id is None or call.id == call_id:
            return pending.pop(index)
    return None


def _call(step: int, n: int, shape: Mapping[str, Any], position: int) -> Call:
    name = shape.get("tool", shape.get("name"))
    args = shape.get("args")
    if not isinstance(name, str) or not isinstance(args, Mapping):
        raise ModelFatal(f"transcript message {position} holds a call without a name or args")
    call_id = shape.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = f"call_{step}_{n}"
    return Call(call_id, name, dict(args))


def _text(content: object) -> str:
    """Message content as text: answers may be any JSON value."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def arguments_json(args: Mapping[str, Any]) -> str:
    """A call's arguments as the JSON text a provider expects (sorted: the same every time)."""
    return json.dumps(args, ensure_ascii=False, sort_keys=True)
