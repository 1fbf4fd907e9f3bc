"""The layer contract: each package of runner imports only the packages its `__init__.py`
says it may, checked on the real import graph (imports inside functions, under
`if TYPE_CHECKING:` and through `importlib.import_module` or `__import__` with a literal name
count too: tests/unit/import_graph.py). Nothing is imported to check it: the files are
parsed."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import runner
from tests.unit.import_graph import every_import, modules

PACKAGE = Path(runner.__file__).parent

# Modules any layer may import: they import nothing of runner themselves.
SHARED = frozenset({"runner.errors", "runner.defaults", "runner.lazy"})

# Top-level modules that are not layers, and what each may import.
ENTRY_POINTS = {
    "runner": None,  # the public surface: it hands on names from every layer
    "runner.__main__": frozenset({"runner.cli"}),
    "runner.context": frozenset({"runner.core"}),  # the README's import path, kept
}

_MAY_IMPORT = re.compile(r"It may import:(.*?)(?:\n\n|\Z)", re.S)


@dataclass(frozen=True)
class Crossing:
    """One import that the contract forbids."""

    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} imports {self.imported} (line {self.line})"


def layer_of(name: str, layers: set[str]) -> str:
    """The layer a module belongs to: its package under runner, or itself at the top."""
    parts = name.split(".")
    package = ".".join(parts[:2])
    return package if package in layers else name


def declared(root: Path, package: str) -> dict[str, frozenset[str]]:
    """What each package under the root says, in its docstring, that it may import."""
    rules = {}
    for init in sorted(root.glob("*/__init__.py")):
        layer = f"{package}.{init.parent.name}"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        said = _MAY_IMPORT.search(doc)
        assert said, f"{layer}/__init__.py does not say what it may import ('It may import:')"
        # The docstrings name runner's packages; a test tree under another name reads the same.
        named = {n.replace("runner", package, 1) for n in re.findall(r"`([\w.]+)`", said.group(1))}
        rules[layer] = frozenset(named - {n.replace("runner", package, 1) for n in SHARED})
    return rules


def crossings(root: Path, package: str) -> list[Crossing]:
    """Every import in the tree at `root` that climbs out of what its layer may import."""
    files = modules(root, package)
    known = set(files)
    rules = declared(root, package)
    shared = {name.replace("runner", package, 1) for name in SHARED}
    entry = {name.replace("runner", package, 1): allowed for name, allowed in ENTRY_POINTS.items()}
    found = []
    for name, path in files.items():
        here = layer_of(name, set(rules))
        for target, line in every_import(path, name, known):
            there = layer_of(target, set(rules))
            if there == here or target == package:
                continue
            if here in shared:
                allowed: frozenset[str] | None = frozenset()  # a leaf imports nothing of runner
            elif here in rules:
                allowed = rules[here] | shared
            elif here in entry:
                allowed = entry[here]
                if allowed is None:
                    continue
                allowed |= shared
            else:
                allowed = frozenset()  # a module outside every layer: it has no place yet
            if there not in allowed:
                found.append(Crossing(name, target, line))
    return found


def test_no_import_climbs_out_of_its_layer() -> None:
    assert crossings(PACKAGE, "runner") == []


def test_every_top_level_module_is_a_shared_leaf_or_an_entry_point() -> None:
    flat = {f"runner.{path.stem}" for path in PACKAGE.glob("*.py")} - {"runner.__init__"}
    assert flat <= SHARED | set(ENTRY_POINTS), sorted(flat - SHARED - set(ENTRY_POINTS))


def test_the_declared_layers_form_no_circle() -> None:
    rules = declared(PACKAGE, "runner")
    assert set(rules) >= {
        "runner.core",
        "runner.store",
        "runner.sql",
        "runner.service",
        "runner.history",
        "runner.models",
        "runner.tracing",
        "runner.cli",
        "runner.ui",
    }
    done: set[str] = set()

    def below(layer: str, path: tuple[str, ...]) -> None:
        assert layer not in path, f"the declared layers go round: {' -> '.join((*path, layer))}"
        for lower in rules.get(layer, frozenset()):
            below(lower, (*path, layer))
        done.add(layer)

    for layer in rules:
        below(layer, ())
    assert rules["runner.core"] == frozenset()  # the step machine stands on nothing


def _tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


LAYERED = {
    "__init__.py": "",
    "errors.py": "",
    "core/__init__.py": '"""Core.\n\nIt may import: only the shared leaves."""\n',
    "core/loop.py": "from pkg import errors\n",
    "store/__init__.py": '"""Store.\n\nIt may import: `runner.core`."""\n',
    "store/runs.py": "from pkg.core import loop\n",
}


def test_the_contract_fails_on_an_import_that_climbs_even_a_lazy_one(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    _tree(root, LAYERED)
    assert crossings(root, "pkg") == []
    (root / "core" / "spans.py").write_text(
        "def trace():\n    from pkg.store import runs\n    return runs\n"
    )
    assert [str(c) for c in crossings(root, "pkg")] == [
        "pkg.core.spans imports pkg.store.runs (line 2)"
    ]


def test_the_contract_fails_on_a_type_only_import_and_on_a_module_outside_the_layers(
    tmp_path: Path,
) -> None:
    root = tmp_path / "pkg"
    _tree(root, LAYERED)
    (root / "core" / "result.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.store.runs import Row\n"
    )
    (root / "stray.py").write_text("from pkg.core import loop\n")
    assert sorted(str(c) for c in crossings(root, "pkg")) == [
        "pkg.core.result imports pkg.store.runs (line 3)",
        "pkg.stray imports pkg.core.loop (line 1)",
    ]


def test_the_contract_fails_on_a_module_named_to_importlib_or_dunder_import(
    tmp_path: Path,
) -> None:
    root = tmp_path / "pkg"
    _tree(root, LAYERED)
    (root / "core" / "spans.py").write_text(
        "import importlib\n"
        "def trace():\n"
        "    importlib.import_module('pkg.store.runs')\n"
        "    return __import__('pkg.store')\n"
    )
    (root / "core" / "steps.py").write_text(
        "from importlib import import_module\nrows = import_module('.runs', package='pkg.store')\n"
    )
    assert sorted(str(c) for c in crossings(root, "pkg")) == [
        "pkg.core.spans imports pkg.store (line 4)",
        "pkg.core.spans imports pkg.store.runs (line 3)",
        "pkg.core.steps imports pkg.store.runs (line 2)",
    ]


def test_a_shared_leaf_that_imports_a_layer_breaks_the_contract(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    _tree(root, {**LAYERED, "errors.py": "from pkg.core import loop\n"})
    assert [str(c) for c in crossings(root, "pkg")] == ["pkg.errors imports pkg.core.loop (line 1)"]


def test_each_package_docstring_names_every_module_in_it() -> None:
    # The map at the top of each package is the map a maintainer reads first: a module it
    # does not name is a room nobody knows is there.
    unnamed = []
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        named = set(re.findall(r"`([\w.]+)`", doc))
        for module in sorted(init.parent.glob("*.py")):
            if module.stem != "__init__" and module.stem not in named:
                unnamed.append(f"{init.parent.name}/{module.name}")
    assert unnamed == []


def sqlalchemy_imports(root: Path) -> list[str]:
    """Every import of SQLAlchemy (or of a module under it) in the folder, lazy ones too."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(name == "sqlalchemy" or name.startswith("sqlalchemy.") for name in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_store_contract_imports_no_sqlalchemy(tmp_path: Path) -> None:
    # runner/store/ is the contract both stores keep (protocol, rows, rules): all the SQL is
    # in runner/sql/, so the in-memory store and the service's types need no database library.
    assert sqlalchemy_imports(PACKAGE / "store") == []
    planted = tmp_path / "store"
    planted.mkdir()
    (planted / "rows.py").write_text("def later():\n    from sqlalchemy.engine import Row\n")
    assert sqlalchemy_imports(planted) == ["rows.py:2"]


# The service reaches storage through runner.store.protocol's RunStore; the one module of
# it that names the SQL store (opening one, the worker's pool, the plain reads of `runner
# list`) is its door, runner.service.database.
SERVICE_DOOR_TO_SQL = "runner.service.database"


def sql_imports_of_the_service(root: Path, package: str) -> list[str]:
    """Every import of the SQL layer by a module of the service but its door."""
    found = modules(root, package)
    service, sql = f"{package}.service", f"{package}.sql"
    door = SERVICE_DOOR_TO_SQL.replace("runner", package, 1)
    return [
        f"{name}:{line} imports {target}"
        for name, path in sorted(found.items())
        if name.startswith(f"{service}.") and name != door
        for target, line in every_import(path, name, found)
        if target == sql or target.startswith(f"{sql}.")
    ]


def test_the_service_reaches_the_sql_store_through_one_door(tmp_path: Path) -> None:
    assert sql_imports_of_the_service(PACKAGE, "runner") == []
    # A planted import, inside a function, of the SQL store elsewhere in the service.
    _tree(
        tmp_path / "runner",
        {
            "__init__.py": "",
            "sql/__init__.py": "",
            "sql/store.py": "",
            "service/__init__.py": "",
            "service/database.py": "from runner.sql.store import *\n",
            "service/worker.py": "def later():\n    import runner.sql.store\n",
        },
    )
    assert sql_imports_of_the_service(tmp_path / "runner", "runner") == [
        "runner.service.worker:2 imports runner.sql.store"
    ]
