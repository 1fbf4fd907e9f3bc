"""None as the journal binds it on SQLite: through an adapter registered for it, which
sqlite3 finds at once instead of failing to adapt it (runner.sql.backend), still NULL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import Agent, Runner
from runner.sql import backend

KEY = (type(None), sqlite3.PrepareProtocol)


@pytest.fixture
def no_adapter_for_none() -> Iterator[None]:
    saved = sqlite3.adapters.pop(KEY, None)
    yield
    sqlite3.adapters.pop(KEY, None)
    if saved is not None:
        sqlite3.adapters[KEY] = saved


@pytest.mark.usefixtures("no_adapter_for_none")
def test_a_journal_on_sqlite_binds_none_as_null(tmp_path: Path) -> None:
    def model(transcript: list[dict[str, object]]) -> dict[str, object]:
        if len(transcript) > 1:
            return {"type": "final", "content": "done"}
        return {"type": "tool", "name": "echo", "args": {"text": "hi"}}

    runner = Runner(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        assert sqlite3.adapters[KEY] is backend._NONE_STAYS_NONE  # registered by the engine
        result = runner.run(Agent(model, {"echo": lambda text: text}), "go", id="nulls")
        assert result.stop_reason == "final"
    finally:
        runner.close()
    connection = sqlite3.connect(tmp_path / "runs.db")
    rows = connection.execute(
        "SELECT kind, typeof(error), typeof(waits_for), typeof(idempotency_key)"
        " FROM entries WHERE run_id = 'nulls' ORDER BY seq"
    ).fetchall()
    assert [row[0] for row in rows] == ["task", "action", "observation", "final"]
    assert {row[1:3] for row in rows} == {("null", "null")}
    # A key where there is one (the tool call's), NULL where there is none.
    assert [row[3] for row in rows] == ["null", "text", "text", "null"]


@pytest.mark.usefixtures("no_adapter_for_none")
def test_a_programs_own_adapter_for_none_is_left_alone() -> None:
    def own(value: None) -> str:
        return "none"

    sqlite3.register_adapter(type(None), own)
    backend._adapt_none_at_once()
    assert sqlite3.adapters[KEY] is own
