"""A quicker `__init__` for the frozen dataclasses a step makes several of (its journal
entries, its action, its counters). A leaf of the step machine: it imports nothing of runner.

A frozen dataclass's own `__init__` sets each field with `object.__setattr__(self, name,
value)`, its `__setattr__` refusing any other way: about 2.5 µs for a journal entry's 17
fields, two entries a step (docs/performance/step.md, the in-memory step). `quick_init` gives the
class an `__init__` of the same signature that stores each field straight into its slot
(through the slot's own descriptor) or, for a class without slots, into its instance dict:
the same object, as frozen as before (its `__setattr__` is left as it is), in under half the
time. Only plain fields are taken: a field with a default factory, keyword-only or left out
of `__init__`, or a class with `__post_init__`, is refused when the class is made.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Replace the frozen dataclass `cls`'s `__init__` with one that stores the fields
    directly (see the module)."""
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not getattr(cls, "__dataclass_params__").frozen:  # noqa: B009 - a dataclass's own
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: its own __init__ must call it")
    slots = "__slots__" in cls.__dict__
    namespace: dict[str, Any] = {}
    signature, body = [], []
    for field in params:
        name = field.name
        if not field.init or field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{name} is not a plain field")
        if field.default is dataclasses.MISSING:
            signature.append(name)
        else:
            namespace[f"_default_{name}"] = field.default
            signature.append(f"{name}=_default_{name}")
        if slots:
            namespace[f"_set_{name}"] = cls.__dict__[name].__set__
            body.append(f"    _set_{name}(_self, {name})")
        else:
            body.append(f"    _fields[{name!r}] = {name}")
    if not slots:
        body.insert(0, "    _fields = _self.__dict__")
    source = f"def __init__(_self, {', '.join(signature)}):\n" + "\n".join(body or ["    pass"])
    exec(source, namespace)  # made from the dataclass's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)  # for inspect.signature
    setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses an assigned method
    return cls
