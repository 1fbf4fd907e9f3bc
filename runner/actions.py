"""What the model asked for, parsed: a final answer, a tool call, or output it got wrong.

Malformed output never raises out of here: it becomes an `invalid` action whose error the
loop shows the model as an observation, so the model can correct itself.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ActionKind(StrEnum):
    """What a model's output asked for, as stored in `entries.action_type`."""

    FINAL = "final"  # an answer: the run ends
    TOOL = "tool"  # a tool call
    INVALID = "invalid"  # output the loop could not use: the model is shown why


# How much of a malformed output is kept for the model and the journal.
_RAW_LIMIT = 500
# The longest tool name (the providers' own limits are shorter; the journal's column holds
# this many characters).
MAX_TOOL_NAME = 200
# The loop runs one call per step for now; an adapter may already return several.
_SEVERAL_CALLS = "several tool calls in one response are not supported yet: call one tool at a time"


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    content: Any = None  # the answer of a final action
    tool: str | None = None
    args: dict[str, Any] | None = None
    tokens: int = 0
    cost: float = 0.0
    error: str | None = None  # why an invalid action is invalid
    raw: str | None = None  # a short repr of an invalid output, for the model and for audit
    # The sorted-key JSON of `args`, when parsing already made it (saves a second dumps).
    canonical_args: str | None = field(default=None, compare=False, repr=False)

    @property
    def signature(self) -> tuple[str, str] | None:
        """The repeat-detection key: tool name and its canonical (sorted-key) arguments."""
        if self.kind is not ActionKind.TOOL or self.tool is None:
            return None
        return (self.tool, self.canonical_args or canonical_json(self.args or {}))


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=False)


def parse_action(output: object) -> Action:
    """Turn whatever the model returned into an `Action`."""
    if not isinstance(output, Mapping):
        return _invalid(output, f"model output must be a dict, got {type(output).__name__}")
    usage = parse_usage(output.get("usage", 0))
    if isinstance(usage, str):
        return _invalid(output, usage)
    tokens, cost = usage
    kind = output.get("type")
    if kind == "final":
        if "content" not in output:
            return _invalid(output, "a final action needs 'content'", tokens, cost)
        content = _answer(output["content"])
        if isinstance(content, _Unusable):
            return _invalid(output, content.why, tokens, cost)
        return Action(ActionKind.FINAL, content=content, tokens=tokens, cost=cost)
    if kind == "invalid" and isinstance(output.get("error"), str):
        # A model adapter's word on a response it could not turn into an action (a refusal,
        # an empty reply): the model is shown that, not a complaint about 'type'.
        return _invalid(output, output["error"], tokens, cost)
    if kind != "tool":
        return _invalid(
            output, f"'type' must be 'final' or 'tool', got {_shown(kind)}", tokens, cost
        )
    name = output.get("name")
    if name is None and "calls" in output:
        return _invalid(output, _SEVERAL_CALLS, tokens, cost)
    if not isinstance(name, str):
        return _invalid(output, f"tool 'name' must be a string, got {_shown(name)}", tokens, cost)
    bad_name = _unusable_name(name)
    if bad_name is not None:
        return _invalid(output, bad_name, tokens, cost)
    args = output.get("args", {})
    if not isinstance(args, Mapping) or not all(isinstance(key, str) for key in args):
        return _invalid(output, "tool 'args' must be a JSON object", tokens, cost, name)
    try:
        # Round-tripping rejects NaN, infinities and values JSON cannot carry, and gives the
        # tool exactly what a journal would give it back after a crash.
        canonical = canonical_json(dict(args))
        plain_args = json.loads(canonical)
    except RecursionError:
        return _invalid(output, "tool 'args' are nested too deeply", tokens, cost, name)
    except (TypeError, ValueError) as exc:
        why = _cut(f"tool 'args' are not valid JSON: {exc}")
        return _invalid(output, why, tokens, cost, name)
    return Action(
        ActionKind.TOOL,
        tool=name,
        args=plain_args,
        tokens=tokens,
        cost=cost,
        canonical_args=canonical,
    )


def parse_usage(usage: object) -> tuple[int, float] | str:
    """`usage` is an int of tokens or a mapping with tokens and cost; else an error text."""
    if usage is None:
        return (0, 0.0)
    if isinstance(usage, Mapping):
        if "tokens" in usage:
            tokens = _tokens(usage["tokens"])
        else:
            given = _tokens(usage.get("input_tokens", 0))
            taken = _tokens(usage.get("output_tokens", 0))
            tokens = None if given is None or taken is None else given + taken
        cost = _cost(usage.get("cost", 0.0))
        if tokens is None or cost is None:
            return f"usage must hold non-negative numbers, got {_shown(dict(usage))}"
        return (tokens, cost)
    tokens = _tokens(usage)
    if tokens is None:
        return f"usage must be a non-negative number of tokens, got {_shown(usage)}"
    return (tokens, 0.0)


def _tokens(value: object) -> int | None:
    """A token count as the seed takes it (`int(usage)`), or None if it is not an amount."""
    # An int is never passed through math.isfinite: a huge one would overflow a float,
    # and the seed simply adds it (then stops for the token budget).
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value)


def _cost(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    try:
        cost = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return cost if math.isfinite(cost) else None


def _invalid(
    output: object, error: str, tokens: int = 0, cost: float = 0.0, tool: str | None = None
) -> Action:
    raw = _shown(output)
    return Action(ActionKind.INVALID, tool=tool, tokens=tokens, cost=cost, error=error, raw=raw)


@dataclass(frozen=True)
class _Unusable:
    why: str


def _answer(content: object) -> object:
    """The answer as the journal gives it back: text as it is, anything else as JSON data.

    A value JSON cannot carry (bytes, an object, NaN, nesting past the interpreter's
    limit) would come back from the journal as something else, so it is refused here and
    the model is told why. The model's own object is kept when the journal gives back an
    equal one (seed 000 returns the content as given); a tuple becomes a list, in memory too.
    """
    if isinstance(content, str) or content is None:
        return content
    try:
        kept = json.loads(json.dumps(content, allow_nan=False))
    except RecursionError:
        return _Unusable("a final answer is nested too deeply to be kept")
    except (TypeError, ValueError) as exc:
        return _Unusable(_cut(f"a final answer must be text or JSON data: {exc}"))
    return content if kept == content else kept


def _unusable_name(name: str) -> str | None:
    """Why a tool name cannot be kept in the journal, or None when it can."""
    if len(name) > MAX_TOOL_NAME:
        return f"tool 'name' is {len(name)} characters long; at most {MAX_TOOL_NAME} are allowed"
    if "\x00" in name:
        return "tool 'name' must not contain a NUL character"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "tool 'name' is not valid Unicode text (it holds a lone surrogate)"
    return None


def _shown(value: object) -> str:
    """A short repr for the model and the journal, whatever the value (safe on deep data)."""
    try:
        text = repr(value)
    except RecursionError:
        text = _SHALLOW.repr(value)
    except Exception as exc:  # a __repr__ of the model's own that raises
        text = f"<{type(value).__name__} whose repr failed: {type(exc).__name__}>"
    return _cut(text)


def _cut(text: str) -> str:
    return text if len(text) <= _RAW_LIMIT else text[:_RAW_LIMIT] + "..."


_SHALLOW = reprlib.Repr()
_SHALLOW.maxlevel = 20
_SHALLOW.maxstring = _RAW_LIMIT
_SHALLOW.maxother = _RAW_LIMIT
