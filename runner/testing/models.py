"""Models for tests: no provider, no network, the same answers every time.

Each is an ordinary model callable (transcript in, action out) that works the same on
`run_agent` and on durable runs, resumed or not: what it answers depends on the transcript
it is shown, never on how often it was called before, so a run resumed from its journal in
another process (or a crash test's second life) goes on where it was.

- `TestModel()`: calls each of the agent's tools once, in order, with arguments made from
  the tool's schema, then answers with what they returned.
- `FunctionModel(fn)`: `fn(transcript)` decides each move (returned as it is).
- `ScriptedModel([move, ...])`: the moves in order, one per model turn (a dict action, a
  string for the final answer, or a function of the transcript).

Each keeps the transcripts it was shown (`seen`) and counts its calls (`calls`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runner.models.schemas import ToolSpec, tool_specs

Transcript = list[dict[str, Any]]
Move = Mapping[str, Any] | str | Callable[[Transcript], Any]


def final(content: Any) -> dict[str, Any]:
    """The action that answers with `content`."""
    return {"type": "final", "content": content}


def call(name: str, /, **args: Any) -> dict[str, Any]:
    """The action that calls tool `name` with `args`."""
    return {"type": "tool", "name": name, "args": args}


def turns(transcript: Transcript) -> int:
    """How many times the model has spoken in `transcript` (a step of several calls is
    one turn): the index of the move it is asked for now."""
    return sum(1 for message in transcript if message["role"] == "assistant")


def tool_results(transcript: Transcript) -> list[dict[str, Any]]:
    """The tool messages of `transcript`, in order."""
    return [message for message in transcript if message["role"] == "tool"]


class _Recording:
    """What every test model keeps: the transcripts shown it."""

    def __init__(self) -> None:
        self.seen: list[Transcript] = []

    @property
    def calls(self) -> int:
        return len(self.seen)

    def _shown(self, transcript: Transcript) -> None:
        self.seen.append([dict(message) for message in transcript])


def _as_action(move: Any) -> Any:
    return final(move) if isinstance(move, str) else move


class FunctionModel(_Recording):
    """A model whose every move is `fn(transcript)`, returned as it is (so a test can give
    the loop malformed output too): what `fn` returns is what the model said."""

    def __init__(self, fn: Callable[[Transcript], Any]) -> None:
        super().__init__()
        self.fn = fn

    def __call__(self, transcript: Transcript) -> Any:
        self._shown(transcript)
        return self.fn(transcript)


class ScriptedModel(_Recording):
    """A model that makes `moves` in order, one per turn of the transcript; past the last
    it raises (the run then stops with model_error, after the loop's retries)."""

    def __init__(self, moves: Sequence[Move]) -> None:
        super().__init__()
        self.moves = list(moves)

    def __call__(self, transcript: Transcript) -> Any:
        self._shown(transcript)
        turn = turns(transcript)
        if turn >= len(self.moves):
            raise IndexError(f"ScriptedModel has {len(self.moves)} moves; turn {turn + 1} asked")
        move = self.moves[turn]
        return _as_action(move(transcript) if callable(move) else move)


class TestModel(_Recording):
    """Calls each tool the agent has once, in the agent's order, with arguments made from
    its schema (`args` gives some by tool name), then answers: `answer` if given, else the
    tools' results as JSON (`{"tool": result, ...}`)."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self, *, answer: Any = None, args: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        super().__init__()
        self.answer = answer
        self.args = {name: dict(given) for name, given in (args or {}).items()}
        self.tools: list[ToolSpec] = []

    def with_tools(self, tools: Mapping[str, Callable[..., Any]]) -> TestModel:
        """This model told the agent's tools (as an adapter is): their names and argument
        schemas. What it is shown is kept in this model's `seen` too."""
        bound = copy.copy(self)
        bound.tools = tool_specs(tools)
        return bound

    def __call__(self, transcript: Transcript) -> Any:
        self._shown(transcript)
        turn = turns(transcript)
        if turn < len(self.tools):
            spec = self.tools[turn]
            made = example_args(spec.parameters)
            made.update(self.args.get(spec.name, {}))
            return {"type": "tool", "name": spec.name, "args": made}
        if self.answer is not None:
            return final(self.answer)
        results = {m["name"]: m["content"] for m in tool_results(transcript)}
        return final(json.dumps(results, default=str, sort_keys=True))


def example_args(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments that fit a tool's JSON schema: each required property (and each optional
    one without a default) given a plain value of its type."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    return {name: example_value(prop) for name, prop in properties.items() if "default" not in prop}


def example_value(schema: Mapping[str, Any]) -> Any:
    """A plain value of the schema's type: its first enum value or example if it has one."""
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("examples"):
        return schema["examples"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return example_value(options[0]) if options else None
    values: dict[Any, Any] = {
        "string": "a",
        "integer": 0,
        "number": 0.0,
        "boolean": False,
        "array": [],
        "object": {},
        "null": None,
    }
    return values.get(kind, "a")
