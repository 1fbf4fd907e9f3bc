"""Public names a package exports, imported from their modules on first use (PEP 562).

`runner --help` and `runner list` load neither the loop nor a provider adapter, and
`run_agent` users never load a database library, while `from runner import Runner` and
`runner.OpenAIChat` work as if imported up front.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` for `package`: each name in `homes` comes from its module there."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value  # the next lookup is a plain global
        return value

    return __getattr__
