"""docs/reference/schema.md documents the schema users query: every table and view a migrated
database holds has its section, every column is named in it, and every section names a table
or view that exists (on SQLite and on PostgreSQL). The tables are also the ones the schema
module declares, so a table added there without its documentation fails here."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import create_engine, inspect

from runner.sql.partitions import is_partition
from runner.sql.schema import metadata

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schema.md"
_SECTION = re.compile(r"^## (Table|View) `(\w+)`", re.M)


def sections() -> dict[str, tuple[str, str]]:
    """Each documented table or view: name -> (kind, the text of its section)."""
    text = PAGE.read_text(encoding="utf-8")
    found = {}
    for match in _SECTION.finditer(text):
        body = text[match.end() :].split("\n## ", 1)[0]
        found[match.group(2)] = (match.group(1), body)
    return found


def test_every_table_and_view_is_documented_column_by_column(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        seen = inspect(engine)
        # The journal's monthly partitions (PostgreSQL) are documented with `entries`.
        tables = {t for t in seen.get_table_names() if not is_partition(t)} - {"alembic_version"}
        views = set(seen.get_view_names())
        columns = {name: [c["name"] for c in seen.get_columns(name)] for name in tables | views}
    finally:
        engine.dispose()
    documented = sections()
    assert {n for n, (kind, _) in documented.items() if kind == "Table"} == tables
    assert {n for n, (kind, _) in documented.items() if kind == "View"} == views
    for name, names in columns.items():
        missing = [c for c in names if f"`{c}`" not in documented[name][1]]
        assert not missing, f"docs/reference/schema.md does not describe {name}.{missing}"


def test_the_documented_tables_are_the_declared_ones() -> None:
    documented = {n for n, (kind, _) in sections().items() if kind == "Table"}
    assert documented == set(metadata.tables)
