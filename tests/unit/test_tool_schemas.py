"""Tool schemas from signatures: what a model adapter tells the model about each tool."""

from __future__ import annotations

import datetime
import enum
import functools
import json
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner import Tool, tool
from runner.models.schemas import SchemaError, ToolSpec, tool_spec, tool_specs, type_schema


def weather(
    city: str,
    days: int,
    idempotency_key: str,
    units: Literal["c", "f"] = "c",
    detail: Optional[str] = None,  # noqa: UP045 - the spelling under test
    hours: list[int] | None = None,
    weights: dict[str, float] | None = None,
    strict: bool = False,
    scale: float = 1.5,
) -> str:
    """Forecast the weather in a city.

    Longer text that the model is not sent.

    Args:
        city: the city's name,
            in English.
        days (int): how many days ahead
        units: degrees Celsius or Fahrenheit
    """
    return city


def test_a_signature_becomes_the_exact_schema_and_the_key_is_hidden() -> None:
    spec = tool_spec("weather", Tool(weather))
    assert spec == ToolSpec(
        name="weather",
        description="Forecast the weather in a city.",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "the city's name, in English."},
                "days": {"type": "integer", "description": "how many days ahead"},
                "units": {
                    "type": "string",
                    "enum": ["c", "f"],
                    "description": "degrees Celsius or Fahrenheit",
                    "default": "c",
                },
                "detail": {"type": ["string", "null"], "default": None},
                "hours": {"type": ["array", "null"], "items": {"type": "integer"}, "default": None},
                "weights": {
                    "type": ["object", "null"],
                    "additionalProperties": {"type": "number"},
                    "default": None,
                },
                "strict": {"type": "boolean", "default": False},
                "scale": {"type": "number", "default": 1.5},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    )
    assert "idempotency_key" not in json.dumps(spec.parameters)


def test_an_explicit_schema_wins_and_is_a_copy() -> None:
    given_schema = {"type": "object", "properties": {"q": {"type": "string", "minLength": 3}}}

    @tool(schema=given_schema, idempotent=True)
    def search(**anything: Any) -> str:
        """Search the index."""
        return ""

    spec = tool_spec("search", search)
    assert spec.parameters == given_schema and spec.description == "Search the index."
    spec.parameters["properties"]["q"]["minLength"] = 99
    assert given_schema["properties"]["q"]["minLength"] == 3
    assert search.idempotent and search.schema is given_schema
    hash(search)  # a Tool stays hashable with a dict schema


def test_a_schema_must_be_a_dict_of_json() -> None:
    with pytest.raises(ValueError, match="tool schema must be a dict"):
        Tool(len, schema=[1])  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="not JSON"):
        tool_spec("t", Tool(len, schema={"default": datetime.date(2026, 1, 1)}))


def test_specs_keep_the_mapping_order_and_wrap_plain_callables() -> None:
    def b() -> None:
        pass

    specs = tool_specs({"zeta": lambda x, y=2: x, "alpha": b})
    assert [s.name for s in specs] == ["zeta", "alpha"]
    assert specs[0].parameters == {
        "type": "object",
        "properties": {"x": {}, "y": {"default": 2}},
        "required": ["x"],
        "additionalProperties": False,
    }
    assert specs[0].description is None and specs[1].description is None


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: float
    label: NotRequired[str]


@pytest.mark.parametrize(
    ("annotation", "schema"),
    [
        (Any, {}),
        (None, {"type": "null"}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (Literal[1, "a"], {"enum": [1, "a"]}),
        (Literal[1, 2] | None, {"anyOf": [{"type": "integer", "enum": [1, 2]}, {"type": "null"}]}),
        (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),  # noqa: UP007
        (int | Any, {}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        (Sequence[bool], {"type": "array", "items": {"type": "boolean"}}),
        (typing.List[int], {"type": "array", "items": {"type": "integer"}}),  # noqa: UP006
        (list, {"type": "array"}),
        (dict, {"type": "object"}),
        (Mapping[str, Any], {"type": "object"}),
        (Annotated[int, "how many"], {"type": "integer", "description": "how many"}),
        (
            Point,
            {
                "type": "object",
                "properties": {"x": {"type": "number"}, "label": {"type": "string"}},
                "required": ["x"],
                "additionalProperties": False,
            },
        ),
    ],
)
def test_type_schemas(annotation: Any, schema: dict[str, Any]) -> None:
    assert type_schema(annotation) == schema


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (datetime.date, "annotated <class 'datetime.date'>"),
        (dict[int, str], "JSON object keys are strings"),
        (bytes, "@tool\\(schema=...\\)"),
    ],
)
def test_types_without_a_json_schema_are_refused_clearly(annotation: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        type_schema(annotation, where="argument 'x' of tool 't'")


def test_a_refusal_names_the_tool_and_the_argument() -> None:
    def when(day: datetime.date) -> str:
        return str(day)

    with pytest.raises(SchemaError, match="argument 'day' of tool 'when'"):
        tool_spec("when", Tool(when))


def test_hints_that_cannot_be_resolved_point_to_schema() -> None:
    def broken(x: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(SchemaError, match=r"cannot resolve the type hints of tool 'b'.*schema="):
        tool_spec("b", Tool(broken))


def test_argument_kinds_the_loop_cannot_pass_or_does_not_need() -> None:
    def positional(a: int, /) -> None:
        pass

    def flexible(a: int, /, b: int = 1, *rest: int, c: str, **more: float) -> None:
        pass

    with pytest.raises(SchemaError, match="by position only"):
        tool_spec("p", Tool(positional))
    assert tool_spec("f", Tool(lambda *a: 0)).parameters["properties"] == {}
    with pytest.raises(SchemaError, match="by position only"):
        tool_spec("f", Tool(flexible))

    def keywords(b: int = 1, *rest: int, c: str, **more: float) -> None:
        pass

    assert tool_spec("k", Tool(keywords)).parameters == {
        "type": "object",
        "properties": {"b": {"type": "integer", "default": 1}, "c": {"type": "string"}},
        "required": ["c"],
        "additionalProperties": {"type": "number"},
    }


class Lookup:
    """Look a word up."""

    def __call__(self, word: str, limit: int = 3) -> str:
        return word


def test_callable_objects_and_partials_are_described_by_their_signature() -> None:
    assert tool_spec("lookup", Tool(Lookup())).parameters["required"] == ["word"]
    assert tool_spec("lookup", Tool(Lookup())).description == "Look a word up."
    bound = functools.partial(weather, days=2)
    spec = tool_spec("weather", Tool(bound))
    assert spec.description == "Forecast the weather in a city."
    assert spec.parameters["required"] == ["city"]
    assert spec.parameters["properties"]["days"]["default"] == 2


def test_a_name_a_provider_would_reject_is_refused() -> None:
    with pytest.raises(SchemaError, match="tool name 'look up'"):
        tool_spec("look up", Tool(len))
    with pytest.raises(SchemaError, match="1 to 64"):
        tool_spec("x" * 65, Tool(len))


def test_an_unreadable_signature_asks_for_a_schema() -> None:
    class Opaque:
        __signature__ = "not a signature"

        def __call__(self) -> None:
            pass

    with pytest.raises(SchemaError, match="cannot read the signature"):
        tool_spec("o", Tool(Opaque()))


# -- a round trip: every annotation of JSON types maps to a schema that maps back ------------

LEAVES: list[Any] = [str, int, float, bool, Any]


def annotations() -> st.SearchStrategy[Any]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            inner.map(lambda t: list[t]),  # type: ignore[valid-type]
            inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
            inner.map(lambda t: tuple[t, ...]),
            inner.filter(lambda t: t is not Any and not _nullable(t)).map(lambda t: t | None),
        )

    literals = st.lists(st.text(max_size=3), min_size=1, max_size=3, unique=True).map(
        lambda values: Literal[tuple(values)]
    )
    return st.recursive(st.sampled_from(LEAVES) | literals, extend, max_leaves=6)


def _nullable(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def from_schema(schema: dict[str, Any]) -> Any:
    """The annotation a schema describes: the inverse of type_schema on JSON types."""
    if schema == {}:
        return Any
    if "anyOf" in schema:
        return Union[tuple(from_schema(option) for option in schema["anyOf"])]  # noqa: UP007
    kind = schema["type"]
    if isinstance(kind, list):
        return from_schema({**schema, "type": kind[0]}) | None
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    if kind == "array":
        items = from_schema(schema.get("items", {}))
        return tuple[items, ...] if schema.get("x-tuple") else list[items]
    if kind == "object":
        return dict[str, from_schema(schema.get("additionalProperties", {}))]  # type: ignore[misc]
    return {"string": str, "integer": int, "number": float, "boolean": bool, "null": None}[kind]


def _mark_tuples(annotation: Any, schema: dict[str, Any]) -> dict[str, Any]:
    """JSON has no tuples: note where the annotation had one, so the round trip can compare."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    marked = dict(schema)
    if origin is tuple:
        marked["x-tuple"] = True
    if origin in (list, tuple) and "items" in schema:
        marked["items"] = _mark_tuples(args[0], schema["items"])
    if origin is dict and "additionalProperties" in schema:
        marked["additionalProperties"] = _mark_tuples(args[1], schema["additionalProperties"])
    if _nullable(annotation):
        (inner,) = [a for a in args if a is not type(None)]
        if "anyOf" in schema:
            marked["anyOf"] = [_mark_tuples(inner, schema["anyOf"][0]), schema["anyOf"][1]]
        else:
            marked = _mark_tuples(inner, {**schema, "type": schema["type"][0]})
            marked["type"] = [schema["type"][0], "null"]
    return marked


@given(annotations())
def test_type_schemas_round_trip(annotation: Any) -> None:
    schema = type_schema(annotation)
    assert json.loads(json.dumps(schema)) == schema  # plain JSON, nothing else
    assert from_schema(_mark_tuples(annotation, schema)) == annotation
