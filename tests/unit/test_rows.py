"""The store's rows stand apart from the SQL schema: what both hold must stay the same."""

from __future__ import annotations

from runner.sql.schema import entries
from runner.store.rows import ENTRY_COLUMNS


def test_the_entry_columns_are_the_entries_tables() -> None:
    # Both stores write an entry's row in this order (runner.store.rows.entry_values); the
    # SQL one binds it to the declared table's columns by position.
    assert [column.name for column in entries.columns] == ENTRY_COLUMNS
