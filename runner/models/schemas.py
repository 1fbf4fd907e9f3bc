"""Tool schemas for the model: JSON schemas built from a tool's signature and docstring.

The model sees each argument the loop will pass by name: type hints become JSON schema
types (Optional, unions, list, dict, tuple, Literal, Enum, TypedDict), defaults make an
argument optional, the docstring's first line describes the tool and an `Args:` section
describes its arguments. `idempotency_key` is the runner's, so the model never sees it.
A tool declared with `@tool(schema=...)` sends that schema instead.
"""

from __future__ import annotations

import collections.abc as abc
import copy
import enum
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.core.tools import KEY_PARAMETER, Tool, as_tools

# What both providers accept as a function name.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")

_SCALARS: dict[Any, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}
_ARRAYS: set[Any] = {list, set, frozenset, tuple, abc.Sequence, abc.MutableSequence, abc.Collection}
_OBJECTS: set[Any] = {dict, abc.Mapping, abc.MutableMapping}


class SchemaError(ValueError):
    """A tool's signature cannot be described as a JSON schema."""


@dataclass(frozen=True)
class ToolSpec:
    """What a model is told about one tool: name, description, arguments' JSON schema."""

    name: str
    description: str | None
    parameters: dict[str, Any]


def tool_specs(tools: Mapping[str, Callable[..., Any]]) -> list[ToolSpec]:
    """One spec per tool, in the mapping's order (so every request lists them alike)."""
    return [tool_spec(name, fn) for name, fn in as_tools(tools).items()]


def tool_spec(name: str, tool: Tool) -> ToolSpec:
    """The spec of one tool: its explicit schema, or one built from its signature."""
    if not NAME_PATTERN.fullmatch(name):
        raise SchemaError(
            f"tool name {name!r} must be 1 to 64 letters, digits, '_' or '-' for a model to call it"
        )
    doc = _docstring(tool.fn)
    if tool.schema is not None:
        try:
            json.dumps(tool.schema)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"the schema of tool {name!r} is not JSON: {exc}") from None
        parameters = copy.deepcopy(tool.schema)
    else:
        parameters = parameters_schema(tool.fn, _argument_docs(doc), name=name)
    return ToolSpec(name, _summary(doc), parameters)


def parameters_schema(
    fn: Callable[..., Any], descriptions: Mapping[str, str] | None = None, *, name: str = ""
) -> dict[str, Any]:
    """The JSON schema (an object) of the arguments `fn` takes by name."""
    label = name or getattr(fn, "__name__", repr(fn))
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise SchemaError(
            f"cannot read the signature of tool {label!r}: declare it with @tool(schema=...)"
        ) from None
    hints = _hints(fn, label)
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra: Any = False
    for parameter in signature.parameters.values():
        if parameter.name == KEY_PARAMETER or parameter.kind is parameter.VAR_POSITIONAL:
            continue
        annotation = hints.get(parameter.name, Any)
        if parameter.kind is parameter.VAR_KEYWORD:
            extra = type_schema(annotation, where=f"**{parameter.name} of tool {label!r}") or True
            continue
        if parameter.kind is parameter.POSITIONAL_ONLY:
            if parameter.default is parameter.empty:
                raise SchemaError(
                    f"tool {label!r} takes {parameter.name!r} by position only, but the runner "
                    "passes every argument by name"
                )
            continue
        schema = type_schema(annotation, where=f"argument {parameter.name!r} of tool {label!r}")
        if descriptions and parameter.name in descriptions:
            schema = {**schema, "description": descriptions[parameter.name]}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        elif _is_json(parameter.default):
            schema = {**schema, "default": parameter.default}
        properties[parameter.name] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": extra,
    }


def type_schema(annotation: Any, *, where: str = "a type") -> dict[str, Any]:
    """The JSON schema of values of `annotation`, as JSON decoding would produce them."""
    if annotation is Any or annotation is inspect.Parameter.empty or annotation is object:
        return {}
    if annotation is None or annotation is type(None):
        return {"type": "null"}
    if isinstance(annotation, type) and annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        schema = type_schema(arguments[0], where=where)
        notes = [note for note in arguments[1:] if isinstance(note, str)]
        return {**schema, "description": notes[0]} if notes else schema
    if origin is typing.Literal:
        return _enum(list(arguments), where)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum([member.value for member in annotation], where)
    if origin is typing.Union or origin is types.UnionType:
        return _union([type_schema(a, where=where) for a in arguments])
    if _is_typed_dict(annotation):
        return _typed_dict(annotation, where)
    container = origin if origin is not None else annotation
    if container in _ARRAYS:
        return _array(container, arguments, where)
    if container in _OBJECTS:
        mapping: dict[str, Any] = {"type": "object"}
        if len(arguments) == 2:
            if arguments[0] is not str:
                raise SchemaError(f"{where}: JSON object keys are strings, not {arguments[0]!r}")
            values = type_schema(arguments[1], where=where)
            if values:
                mapping["additionalProperties"] = values
        return mapping
    raise SchemaError(
        f"{where} is annotated {annotation!r}, which has no JSON schema here: annotate it with "
        "JSON types (str, int, float, bool, list, dict, Literal, ...) or declare the tool "
        "with @tool(schema=...)"
    )


def _array(container: Any, arguments: tuple[Any, ...], where: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array"}
    if container is tuple and arguments and arguments[-1] is not Ellipsis:
        if arguments == ((),):  # tuple[()]: the empty tuple
            return {**schema, "maxItems": 0}
        items = [type_schema(a, where=where) for a in arguments]
        return {**schema, "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if arguments:
        items_schema = type_schema(arguments[0], where=where)
        if items_schema:
            schema["items"] = items_schema
    if container in (set, frozenset):
        schema["uniqueItems"] = True
    return schema


def _union(options: list[dict[str, Any]]) -> dict[str, Any]:
    if any(option == {} for option in options):
        return {}  # a union with Any admits anything
    null = {"type": "null"}
    rest = [option for option in options if option != null]
    if len(rest) == 1 and len(options) == 2:
        (only,) = rest
        # X | None: a nullable type where JSON schema allows it plainly, anyOf otherwise.
        if isinstance(only.get("type"), str) and "enum" not in only:
            return {**only, "type": [only["type"], "null"]}
    return {"anyOf": options}


def _enum(values: list[Any], where: str) -> dict[str, Any]:
    if not all(_is_json(value) for value in values):
        raise SchemaError(f"{where}: the choices {values!r} are not all JSON values")
    kinds = {_json_type(value) for value in values}
    schema: dict[str, Any] = {"enum": values}
    if len(kinds) == 1:
        (kind,) = kinds
        schema = {"type": kind, **schema}
    return schema


def _typed_dict(annotation: Any, where: str) -> dict[str, Any]:
    fields = typing.get_type_hints(annotation, include_extras=True)
    # Under `from __future__ import annotations` the class counts a NotRequired key as
    # required (its hint was a string when the class was made): the resolved hint decides.
    required_keys: frozenset[str] = getattr(annotation, "__required_keys__", frozenset(fields))
    properties = {}
    required = []
    for key, hint in fields.items():
        origin = typing.get_origin(hint)
        if origin is typing.NotRequired or origin is typing.Required:
            hint = typing.get_args(hint)[0]
        if origin is typing.Required or (origin is not typing.NotRequired and key in required_keys):
            required.append(key)
        properties[key] = type_schema(hint, where=where)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _is_typed_dict(annotation: Any) -> bool:
    return isinstance(annotation, type) and typing.is_typeddict(annotation)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _hints(fn: Callable[..., Any], label: str) -> dict[str, Any]:
    target: Any = fn
    if isinstance(fn, functools.partial):
        target = fn.func
    elif not inspect.isroutine(fn) and not inspect.isclass(fn):
        target = type(fn).__call__  # a callable object: its __call__ carries the hints
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        raise SchemaError(
            f"cannot resolve the type hints of tool {label!r} ({type(exc).__name__}: {exc}): "
            "import the names they use at module level, or declare it with @tool(schema=...)"
        ) from None


def _docstring(fn: Callable[..., Any]) -> str | None:
    # A callable object is described by its class's docstring, as getdoc finds it.
    return inspect.getdoc(fn.func if isinstance(fn, functools.partial) else fn)


def _summary(doc: str | None) -> str | None:
    lines = (doc or "").strip().splitlines()
    return (lines[0].strip() or None) if lines else None


_SECTION = re.compile(r"(Args|Arguments|Parameters):\s*")
_ARGUMENT = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")


def _argument_docs(doc: str | None) -> dict[str, str]:
    """Descriptions from a Google-style `Args:` section: `name: text` or `name (type): text`."""
    found: dict[str, str] = {}
    lines = (doc or "").splitlines()
    starts = [i for i, line in enumerate(lines) if _SECTION.fullmatch(line.strip())]
    if not starts:
        return found
    base = _indent(lines[starts[0]])
    current: str | None = None
    item_indent = 0
    for line in lines[starts[0] + 1 :]:
        if not line.strip():
            continue
        if _indent(line) <= base:
            break  # the next section
        match = _ARGUMENT.fullmatch(line.strip())
        if match and (current is None or _indent(line) <= item_indent):
            current, item_indent = match.group(1), _indent(line)
            found[current] = match.group(2).strip()
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
