"""`quick_init` (runner.core.frozen): the step's frozen dataclasses made without a
`object.__setattr__` a field, and nothing else about them changed."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from runner.core.actions import Action, ActionKind
from runner.core.counters import Counters
from runner.core.frozen import quick_init
from runner.core.journal import Entry, EntryKind


def twins(slots: bool) -> tuple[type[Any], type[Any]]:
    """The same frozen dataclass twice: as dataclasses makes it, and with quick_init."""

    def make() -> type[Any]:
        class Shape:
            __annotations__ = {"a": "int", "b": "str", "c": "Any", "d": "tuple[int, ...]"}
            b = "b"
            c = None
            d = ()

        return dataclasses.dataclass(frozen=True, slots=slots)(Shape)

    return make(), quick_init(make())


@pytest.mark.parametrize("slots", [True, False])
def test_an_object_made_quickly_is_the_one_the_dataclass_makes(slots: bool) -> None:
    plain, quick = twins(slots)
    assert inspect.signature(quick) == inspect.signature(plain)
    for args, kwargs in [((1,), {}), ((1, "x"), {"d": (2,)}), ((), {"a": 3, "c": [1]})]:
        made, expected = quick(*args, **kwargs), plain(*args, **kwargs)
        assert dataclasses.astuple(made) == dataclasses.astuple(expected)
        assert repr(made).split("(", 1)[1] == repr(expected).split("(", 1)[1]
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.a = 9
        assert dataclasses.replace(made, b="y").b == "y"
    assert quick(1, "x") == quick(1, "x") and hash(quick(1, "x")) == hash(quick(1, "x"))
    assert quick(1) != quick(2)
    with pytest.raises(TypeError):
        quick()  # a field with no default is still required
    with pytest.raises(TypeError):
        quick(1, e=2)  # and no other keyword is taken


def test_the_steps_own_classes_keep_their_fields_defaults_and_freezing() -> None:
    counters = Counters(steps=2, tokens=5)
    entry = Entry(EntryKind.ACTION, 2, counters, tool="echo", args={"i": 1}, idempotency_key="k")
    assert (entry.kind, entry.step, entry.counters, entry.tool, entry.args) == (
        EntryKind.ACTION,
        2,
        counters,
        "echo",
        {"i": 1},
    )
    assert (entry.content, entry.attempt, entry.cost, entry.call_id) == (None, 1, 0.0, None)
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert dataclasses.replace(entry, attempt=2).attempt == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.step = 3  # type: ignore[misc]
    action = Action(ActionKind.TOOL, tool="echo", args={"i": 1}, canonical_args='{"i": 1}')
    assert action == Action(ActionKind.TOOL, tool="echo", args={"i": 1})  # not compared
    assert (action.calls, action.tokens, action.signature) == ((), 0, ("echo", '{"i": 1}'))
    with pytest.raises(dataclasses.FrozenInstanceError):
        action.tool = "other"  # type: ignore[misc]
    assert Counters() == Counters(0, 0, 0.0, 0)


def test_a_field_it_cannot_store_plainly_is_refused_when_the_class_is_made() -> None:
    @dataclasses.dataclass(frozen=True)
    class Factory:
        items: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (Factory, Mutable, Checked):
        with pytest.raises(TypeError):
            quick_init(cls)
