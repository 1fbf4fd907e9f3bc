"""The payload codec seam on both databases and in memory: a run's task, arguments, results,
messages and output cross a user's codec on the way to their rows (nothing of them plain in
SQL) and come back as they were through every reader; metadata stays plain."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from runner import Runner
from runner.core.clock import ManualClock
from runner.core.deltas import Delta
from runner.sql import deltas
from runner.sql.store import SqlStore
from runner.store.delta_writer import Put
from runner.store.payloads import ENVELOPE_PREFIX, Payloads
from runner.testing import InMemoryStore
from tests.conftest import fresh_database

from .payload_agents import REF, SECRET, Hide


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def runner(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runner]:
    if request.param == "memory":
        store = InMemoryStore(clock=ManualClock(1_800_000_000.0), payloads=Payloads([Hide()]))
        with Runner(store=store) as memory:
            yield memory
        return
    for url in fresh_database(request, request.param, tmp_path):
        with Runner(url, codecs=[Hide()]) as database:
            yield database


def stored_text(runner: Runner, run_id: str) -> str:
    """Every payload column of the run as the store keeps it, as one text."""
    if isinstance(runner.store, InMemoryStore):
        store = runner.store
        return repr((store.runs[run_id], store.entries[run_id], store.messages.get(run_id)))
    with runner.engine.connect() as connection:
        rows = [
            connection.execute(text(sql), {"id": run_id}).all()
            for sql in (
                "SELECT task, output FROM runs WHERE id = :id",
                "SELECT content, args FROM entries WHERE run_id = :id",
                "SELECT body FROM messages WHERE run_id = :id",
            )
        ]
    return repr(rows)


def test_every_payload_is_sealed_at_rest_and_read_back_plain(runner: Runner) -> None:
    run_id = runner.submit(REF, f"task: {SECRET}", id="sealed")
    runner.send(run_id, f"message: {SECRET}", key="m1")
    result = runner.resume(run_id)
    assert result.output == f"answer: found {SECRET} 1"
    at_rest = stored_text(runner, run_id)
    assert "swordfish" not in at_rest and ENVELOPE_PREFIX in at_rest
    # Every reader opens them: the row, the journal, the transcript.
    assert runner.row(run_id).task == f"task: {SECRET}"
    assert runner.row(run_id).output == result.output
    journal = runner.journal(run_id)
    assert journal[0].content == f"task: {SECRET}"
    assert next(e.args for e in journal if e.kind == "action") == {"q": f"{SECRET} 0", "size": 0}
    assert runner.get(run_id).transcript == result.transcript
    # Metadata stays plain: tool names, kinds, stop reasons, counters.
    if not isinstance(runner.store, InMemoryStore):
        with runner.engine.connect() as connection:
            tools = connection.execute(
                text("SELECT tool FROM entries WHERE run_id = 'sealed' AND kind = 'action'")
            ).scalars()
            assert list(tools) == ["look", "look"]
            assert connection.execute(
                text("SELECT stop_reason, steps FROM runs WHERE id = 'sealed'")
            ).one() == ("final", 3)


def test_pieces_of_a_streamed_response_are_sealed_too(db_url: str) -> None:
    store = SqlStore(db_url, payloads=Payloads([Hide()]))
    try:
        piece = Delta(1, 0, f"streaming {SECRET}")
        deltas.write(store.engine, [Put("r", piece, datetime.now(UTC))])
        with store.engine.connect() as connection:
            stored = connection.execute(text("SELECT text FROM deltas")).scalar_one()
        assert "swordfish" not in stored and stored.startswith(ENVELOPE_PREFIX)
        assert [delta for _, delta in store.deltas_after("r", 0, 10)] == [piece]
    finally:
        store.close()
