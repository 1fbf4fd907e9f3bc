"""docs/architecture.md's claims that a test can hold, held here (the layer and circle
claims: test_layers.py and test_layout.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import runner

PACKAGE = Path(runner.__file__).parent
ROOT = PACKAGE.parent

# A database named in code: a dialect's or a URL scheme's name as a string.
DIALECTS = frozenset({"sqlite", "postgresql", "postgres", "sqlite+pysqlite", "postgresql+psycopg"})

# A module's path as the page writes it: `runner/sql/backend.py` or `sql/backend.py`.
_LAYERS = "core|sql|store|service|history|testing|cli|ui|models|tracing|mcp|integrations"
_PATH = re.compile(rf"\b((?:runner/)?(?:{_LAYERS})/[\w/]+\.py)\b")

# Where code may name a dialect, and why (docs/architecture.md says the same).
NAMES_A_DIALECT = {
    "sql/backend.py": "the one object per dialect, chosen from the URL",
    "sql/urls.py": "a URL read before any engine exists (where its password ends)",
    "sql/database.py": "a URL read before any engine exists (postgresql:// means psycopg 3)",
    "sql/plain_connection.py": "a URL read before any engine exists (which driver opens it)",
    "sql/schema.py": "a column type's variant, declared with the table",
    "history/query.py": "which reader `runner sql` runs, by the URL's dialect",
}


def dialect_names(path: Path) -> list[int]:
    """The lines where the module names a dialect in its code (its docstrings are prose)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lower() in DIALECTS
        and id(node) not in docstrings
    ]


def naming_a_dialect(root: Path) -> set[str]:
    return {
        path.relative_to(root).as_posix()
        for path in sorted(root.rglob("*.py"))
        if dialect_names(path)
    }


def test_every_dialect_difference_is_in_the_backend() -> None:
    # A statement that runs differently on SQLite and PostgreSQL asks the Backend (a hook or
    # a flag of sql/backend.py), never `dialect.name == "..."` on its own.
    assert naming_a_dialect(PACKAGE) == set(NAMES_A_DIALECT)


def test_the_dialect_check_finds_a_planted_name(tmp_path: Path) -> None:
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "writer.py").write_text(
        '"""Doc naming sqlite is prose."""\n'
        "def lock(engine):\n"
        '    return engine.dialect.name == "sqlite"\n'
    )
    assert naming_a_dialect(tmp_path) == {"sql/writer.py"}
    assert dialect_names(tmp_path / "sql" / "writer.py") == [3]


def test_the_sql_layer_is_the_only_one_that_imports_sqlalchemy_in_the_store_path() -> None:
    # The store's contract (runner/store/) and the in-memory store (runner/testing/) import
    # no SQLAlchemy; the SQL store (runner/sql/) is where it is used.
    from tests.unit.test_layers import sqlalchemy_imports

    assert sqlalchemy_imports(PACKAGE / "store") == []
    assert sqlalchemy_imports(PACKAGE / "testing") == []
    assert sqlalchemy_imports(PACKAGE / "sql") != []


def test_the_architecture_page_names_files_that_exist() -> None:
    # Every `runner/...py` or `core/...py`-style path the page names is a file of the tree.
    text = (ROOT / "docs" / "architecture.md").read_text()
    import re

    named = set(
        re.findall(
            r"\b((?:runner/)?(?:core|sql|store|service|history|testing|cli|ui|models|tracing|mcp|integrations)/[\w/]+\.py)\b",
            text,
        )
    )
    missing = sorted(n for n in named if not (PACKAGE / n.removeprefix("runner/")).exists())
    assert named and missing == []


def feature_table() -> dict[str, tuple[str, list[str]]]:
    """docs/architecture.md's "Where a feature lives": feature -> (open first, then)."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where a feature lives", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("feature", "---"):
            continue
        first = re.findall(r"`([\w/]+\.py)`", cells[1])
        rest = re.findall(r"`([\w/]+\.py)`", cells[2])
        rows[cells[0]] = (first[0], rest)
    return rows


def test_each_feature_has_one_module_to_open_first_that_names_the_others() -> None:
    rows = feature_table()
    assert {"provider limits", "messages", "schedules", "trees of runs", "follows"} <= set(rows)
    for feature, (first, rest) in rows.items():
        doc = ast.get_docstring(ast.parse((PACKAGE / first).read_text())) or ""
        unnamed = [
            path
            for path in rest
            if path not in doc and "runner." + path.removesuffix(".py").replace("/", ".") not in doc
        ]
        assert unnamed == [], f"{feature}: {first}'s docstring does not name {unnamed}"


def test_modules_of_one_name_in_two_layers_are_one_feature() -> None:
    # A stem found in more than one layer (limits.py, messages.py, ...) is listed in one row.
    rows = feature_table()
    by_stem: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*/*.py"):
        if path.name != "__init__.py":
            by_stem.setdefault(path.stem, set()).add(f"{path.parent.name}/{path.name}")
    listed = {feature: {first, *rest} for feature, (first, rest) in rows.items()}
    for _stem, paths in sorted(by_stem.items()):
        if len(paths) < 2:
            continue
        homes = [feature for feature, named in listed.items() if paths <= named]
        assert homes, f"{sorted(paths)} share a name but no one feature's row lists them all"
