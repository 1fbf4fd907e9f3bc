"""What the model asked for, parsed: a final answer, tool calls, or output it got wrong.

Malformed output never raises out of here: it becomes an `invalid` action whose error the
loop shows the model as an observation, so the model can correct itself.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from json.encoder import encode_basestring_ascii as _quoted
from typing import Any

from runner.core.frozen import quick_init


class ActionKind(StrEnum):
    """What a model's output asked for, as stored in `entries.action_type`."""

    FINAL = "final"  # an answer: the run ends
    TOOL = "tool"  # a tool call
    INVALID = "invalid"  # output the loop could not use: the model is shown why


# How much of a malformed output is kept for the model and the journal.
_RAW_LIMIT = 500
# The longest tool name or provider call id (the providers' own limits are shorter; the
# journal's columns hold this many characters).
MAX_TOOL_NAME = 200
# The deepest nesting of lists and objects kept in args or an answer. A fixed limit, far
# inside the interpreter's recursion limit: the parse-time round trip and every later
# encode and decode of the value (the journal's write, a resume's read) run at different
# stack depths, and a value accepted at one must never overflow at another.
MAX_NESTING = 200


@dataclass(frozen=True)
class Call:
    """One of several tool calls a model asked for in one response."""

    tool: str
    args: dict[str, Any]
    id: str | None = None  # the provider's id of the call, when it gave one
    canonical_args: str | None = field(default=None, compare=False, repr=False)

    @property
    def signature(self) -> tuple[str, str]:
        return (self.tool, self.canonical_args or canonical_json(self.args))


@quick_init  # one a step
@dataclass(frozen=True)
class Action:
    kind: ActionKind
    content: Any = None  # the answer of a final action
    tool: str | None = None  # the call of a single-call tool action
    args: dict[str, Any] | None = None
    tokens: int = 0
    cost: float = 0.0
    error: str | None = None  # why an invalid action is invalid
    raw: str | None = None  # a short repr of an invalid output, for the model and for audit
    # The sorted-key JSON of `args`, when parsing already made it (saves a second dumps).
    canonical_args: str | None = field(default=None, compare=False, repr=False)
    call_id: str | None = None  # the provider's id of a single call
    text: str | None = None  # what the model said beside its tool call(s)
    # A tool action of several calls has them here (and no `tool` or `args` of its own).
    calls: tuple[Call, ...] = ()

    @property
    def signature(self) -> tuple[str, str] | None:
        """The repeat-detection key: tool name and its canonical (sorted-key) arguments."""
        if self.kind is not ActionKind.TOOL or self.tool is None:
            return None
        return (self.tool, self.canonical_args or canonical_json(self.args or {}))

    @property
    def signatures(self) -> list[tuple[str, str]]:
        """The repeat-detection key of each call (one per call of a several-call step)."""
        if self.calls:
            return [call.signature for call in self.calls]
        signature = self.signature
        return [] if signature is None else [signature]


# What `json.dumps(value, sort_keys=True, allow_nan=False)` makes, made by one encoder kept
# for every call (dumps with options builds a new one each time, a third of the cost);
# `encode` keeps no state between calls, so threads may share it.
_CANONICAL = json.JSONEncoder(sort_keys=True, allow_nan=False)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def parse_action(output: object) -> Action:
    """Turn whatever the model returned into an `Action`."""
    # A plain dict (the common case) is not put through the ABC's isinstance check.
    if type(output) is not dict and not isinstance(output, Mapping):
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
    text = output.get("text")
    if text is not None and not isinstance(text, str):
        return _invalid(output, f"'text' must be a string, got {_shown(text)}", tokens, cost)
    text = text or None
    if output.get("name") is None and "calls" in output:
        return _several(output, output["calls"], text, tokens, cost)
    call = _call(output)
    if isinstance(call, _Unusable):
        return _invalid(output, call.why, tokens, cost, call.tool)
    return _single(*call, text, tokens, cost)


def _several(
    output: Mapping[Any, Any], shapes: object, text: str | None, tokens: int, cost: float
) -> Action:
    """The multi-call form: every call must be usable, or the whole response is invalid."""
    if not isinstance(shapes, list | tuple) or not shapes:
        why = f"tool 'calls' must be a non-empty list, got {_shown(shapes)}"
        return _invalid(output, why, tokens, cost)
    calls: list[_Parsed] = []
    for n, shape in enumerate(shapes, 1):
        if not isinstance(shape, Mapping):
            why = f"call {n} must be a dict with 'name' and 'args', got {_shown(shape)}"
            return _invalid(output, why, tokens, cost)
        call = _call(shape)
        if isinstance(call, _Unusable):
            return _invalid(output, f"call {n}: {call.why}", tokens, cost)
        calls.append(call)
    ids = [call_id for _, _, call_id, _ in calls if call_id is not None]
    if len(ids) != len(set(ids)):
        return _invalid(output, "the calls' ids must differ from one another", tokens, cost)
    if len(calls) == 1:  # one call is a single-call step, whichever form it came in
        return _single(*calls[0], text, tokens, cost)
    several = tuple(Call(*call) for call in calls)
    return Action(ActionKind.TOOL, tokens=tokens, cost=cost, text=text, calls=several)


def _single(
    name: str,
    args: dict[str, Any],
    call_id: str | None,
    canonical: str,
    text: str | None,
    tokens: int,
    cost: float,
) -> Action:
    return Action(
        ActionKind.TOOL,
        tool=name,
        args=args,
        tokens=tokens,
        cost=cost,
        canonical_args=canonical,
        call_id=call_id,
        text=text,
    )


# A usable call: its tool name, plain arguments, provider id (or None), canonical arguments.
_Parsed = tuple[str, dict[str, Any], str | None, str]


def _call(shape: Mapping[Any, Any]) -> _Parsed | _Unusable:
    """One call's name, arguments and id, or why they cannot be used."""
    name = shape.get("name")
    if not isinstance(name, str):
        return _Unusable(f"tool 'name' must be a string, got {_shown(name)}")
    bad_name = _unusable_name(name)
    if bad_name is not None:
        return _Unusable(bad_name)
    call_id = shape.get("id")
    if call_id is not None and not isinstance(call_id, str):
        return _Unusable(f"tool call 'id' must be a string, got {_shown(call_id)}", name)
    bad_id = None if not call_id else _unusable_name(call_id, "tool call 'id'")
    if bad_id is not None:
        return _Unusable(bad_id, name)
    args = shape.get("args", {})
    # Flat arguments of plain scalars (the common case) need no round trip (below), and
    # their keys are already checked (all exact strs).
    flat = plain_args = _flat_copy(args) if type(args) is dict else None
    if flat is None and (
        not isinstance(args, Mapping) or not all(isinstance(key, str) for key in args)
    ):
        return _Unusable("tool 'args' must be a JSON object", name)
    try:
        # Round-tripping rejects NaN, infinities and values JSON cannot carry, and gives the
        # tool exactly what a journal would give it back after a crash. Flat arguments of
        # plain scalars come back as they went: copied, not round-tripped.
        if plain_args is not None:
            canonical = _flat_json(plain_args)  # still raises where JSON cannot go
        else:
            canonical = canonical_json(dict(args))
            plain_args = json.loads(canonical)
    except RecursionError:
        return _Unusable("tool 'args' are nested too deeply", name)
    except (TypeError, ValueError) as exc:
        return _Unusable(_cut(f"tool 'args' are not valid JSON: {exc}"), name)
    if flat is None and _too_deep(plain_args, len(canonical)):  # flat: one level deep
        return _Unusable("tool 'args' are nested too deeply", name)
    return (name, plain_args, call_id or None, canonical)


def parse_usage(usage: object) -> tuple[int, float] | str:
    """`usage` is an int of tokens or a mapping with tokens and cost; else an error text."""
    if type(usage) is int and usage >= 0:  # the common case (0 when not given), at once
        return (usage, 0.0)
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
    tool: str | None = None  # the call's tool name, when it had a usable one


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
        text = json.dumps(content, allow_nan=False)
        kept = json.loads(text)
    except RecursionError:
        return _Unusable("a final answer is nested too deeply to be kept")
    except (TypeError, ValueError) as exc:
        return _Unusable(_cut(f"a final answer must be text or JSON data: {exc}"))
    if _too_deep(kept, len(text)):
        return _Unusable("a final answer is nested too deeply to be kept")
    return content if kept == content else kept


# Values JSON gives back as they were, by exact type (a subclass, an int enum say, comes
# back as its base type from a round trip; a float may be NaN or infinite).
_SCALARS = frozenset({str, int, bool, type(None)})


def _flat_copy(args: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the JSON round trip of `args` gives, without the round trip, when every value
    is a plain scalar (str, int, bool, None, a finite float): a copy with its keys sorted,
    as `json.loads(canonical_json(args))` would have them, and equal values (JSON carries
    these exactly: a finite float's repr, an int of any size, a str's every code point).
    None for anything else (nesting, NaN, other types), which takes the round trip."""
    for key, value in args.items():
        kind = type(value)
        if type(key) is not str:  # a str subclass comes back a str
            return None
        if kind not in _SCALARS and not (kind is float and math.isfinite(value)):
            return None
    return {key: args[key] for key in sorted(args)}


# The JSON of the constants, as json writes them.
_CONSTANTS: dict[object, str] = {True: "true", False: "false", None: "null"}


def _flat_json(flat: dict[str, Any]) -> str:
    """`canonical_json(flat)` for what `_flat_copy` made (keys sorted, values plain scalars),
    written here in a third of the time json's encoder takes for a dict of a few keys (it is
    made anew each call). Each part as json writes it: a str through json's own escaping, an
    int and a finite float by their types' own repr (an int too long for text raises the
    ValueError json raises), the constants as above, with json's default separators."""
    parts = []
    for key, value in flat.items():
        kind = type(value)
        if kind is str:
            text = _quoted(value)
        elif kind is int:
            text = int.__repr__(value)
        elif kind is float:
            text = float.__repr__(value)
        else:
            text = _CONSTANTS[value]
        parts.append(f"{_quoted(key)}: {text}")
    return "{" + ", ".join(parts) + "}"


def _too_deep(value: object, length: int) -> bool:
    """Whether JSON data (`length` characters of JSON text) nests past MAX_NESTING."""
    if length < 2 * MAX_NESTING:
        return False  # each level takes two characters at least: the common case, free
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:  # iterative: the point is not to depend on the stack's depth
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_NESTING:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def _unusable_name(name: str, label: str = "tool 'name'") -> str | None:
    """Why a tool name (or call id) cannot be kept in the journal, or None when it can."""
    if len(name) > MAX_TOOL_NAME:
        return f"{label} is {len(name)} characters long; at most {MAX_TOOL_NAME} are allowed"
    if "\x00" in name:
        return f"{label} must not contain a NUL character"
    if name.isascii():  # no lone surrogate, and no encoding to make (the common case)
        return None
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"{label} is not valid Unicode text (it holds a lone surrogate)"
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
