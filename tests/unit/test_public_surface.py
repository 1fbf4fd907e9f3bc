"""The public surface is written once: in `runner/__init__.py` (and `runner/models/__init__.py`)
the type checkers' imports, the `_HOMES` table the names load from, and `__all__` name the
same names from the same modules, and every home really defines its name.

Read from the source (ast), not from the imported package: the TYPE_CHECKING block never
runs, and a name the table lost would simply be missing from a live `__all__`.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import runner

ROOT = Path(runner.__file__).parent
PACKAGES = {"runner": ROOT / "__init__.py", "runner.models": ROOT / "models" / "__init__.py"}


def _checked_imports(tree: ast.Module) -> dict[str, str]:
    """What the `if TYPE_CHECKING:` block imports: name -> module."""
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, "one TYPE_CHECKING block"
    imported: dict[str, str] = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None, ast.unparse(node)
        for alias in node.names:
            # `X as X`: an explicit re-export, which type checkers need with a computed __all__.
            assert alias.asname == alias.name, f"{alias.name} is not re-exported as itself"
            assert alias.name not in imported, f"{alias.name} imported twice"
            imported[alias.name] = node.module
    return imported


def _assigned(tree: ast.Module, name: str) -> ast.expr:
    values = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == [name]
    ]
    assert len(values) == 1, f"{name} is assigned once"
    return values[0]


def _homes(tree: ast.Module) -> dict[str, str]:
    table = ast.literal_eval(_assigned(tree, "_HOMES"))
    assert isinstance(table, dict)
    return table


def _disagreements(source: str) -> list[str]:
    """Where the type checkers' imports and `_HOMES` differ: a name in one only, or one
    name from two modules."""
    tree = ast.parse(source)
    imports, homes = _checked_imports(tree), _homes(tree)
    found = [f"{name}: imported for type checkers only" for name in imports.keys() - homes]
    found += [f"{name}: in _HOMES only" for name in homes.keys() - imports]
    found += [
        f"{name}: imported from {imports[name]}, loaded from {homes[name]}"
        for name in imports.keys() & homes
        if imports[name] != homes[name]
    ]
    return sorted(found)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_checked_imports_and_the_table_name_the_same_names_from_the_same_modules(
    package: str,
) -> None:
    assert _disagreements(PACKAGES[package].read_text()) == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_all_and_dir_come_from_the_table(package: str) -> None:
    tree = ast.parse(PACKAGES[package].read_text())
    assert ast.unparse(_assigned(tree, "__all__")) == "sorted(_HOMES)"
    module = importlib.import_module(package)
    assert module.__all__ == sorted(_homes(tree))
    assert dir(module) == module.__all__


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_home_defines_its_name(package: str) -> None:
    tree = ast.parse(PACKAGES[package].read_text())
    missing = [
        f"{name} from {home}"
        for name, home in _homes(tree).items()
        # getattr, not vars(): a home may itself load its names on first use (runner.models).
        if not hasattr(importlib.import_module(home), name)
    ]
    assert missing == []
    module = importlib.import_module(package)
    for name, home in _homes(tree).items():
        assert getattr(module, name) is getattr(importlib.import_module(home), name)


def test_the_check_sees_a_name_missing_from_the_table_and_one_from_another_module() -> None:
    source = PACKAGES["runner"].read_text()
    lost = source.replace('    "Budgets": "runner.core.budgets",\n', "")
    assert _disagreements(lost) == ["Budgets: imported for type checkers only"]
    moved = source.replace(
        '"StopReason": "runner.core.stop_reasons"', '"StopReason": "runner.core.budgets"'
    )
    assert _disagreements(moved) == [
        "StopReason: imported from runner.core.stop_reasons, loaded from runner.core.budgets"
    ]
