"""A drain (`runner worker --once`) does not end while a runnable run is only held for a
moment by another transaction: a follower's mark holds the run's row FOR SHARE, and a
claim on PostgreSQL passes over a row another transaction holds (SKIP LOCKED). It ended
with the run left queued; it now looks again until the row is free, and ends when the
runs left are ones its claim leaves by a rule of its own."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from runner import Runner, Worker
from runner.sql import leases
from runner.sql.database import open_engine
from tests.conditions import GENEROUS, wait_until

CALCULATOR = f"{Path(__file__).resolve().parents[2] / 'examples' / 'calculator.py'}:agent"
LOOKING_AGAIN = "a runnable run is held by another transaction: looking again"


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_drain_waits_out_a_run_held_by_a_followers_mark(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Runner(db_url) as runner:
        runner.submit(CALCULATOR, "What is 2 + 2?", id="held")
    engine = open_engine(db_url)
    worker = Worker(db_url, once=True, poll=0.02)
    try:
        with caplog.at_level(logging.DEBUG, logger="runner.worker"), engine.connect() as holder:
            with holder.begin():  # the lock a follower's mark takes (runner.sql.follows)
                holder.execute(text("SELECT id FROM runs WHERE id = 'held' FOR SHARE"))
                serving = threading.Thread(target=worker.serve, daemon=True)
                serving.start()
                wait_until(
                    lambda: (
                        not serving.is_alive()
                        or any(r.getMessage() == LOOKING_AGAIN for r in caplog.records)
                    ),
                    what="the drain to find the run held",
                )
                assert serving.is_alive(), [r.getMessage() for r in caplog.records]
            serving.join(GENEROUS)
    finally:
        engine.dispose()
    assert not serving.is_alive()
    assert worker.finished == 1
    with Runner(db_url) as runner:
        assert runner.row("held").status == "finished"


def test_a_drain_ends_leaving_a_due_run_a_full_queue_keeps(db_url: str) -> None:
    """A due run the claim leaves by a rule of its own (its queue is full, another worker
    holds the slot) is no reason to wait: the drain claims once more, then ends."""
    with Runner(db_url) as runner:
        runner.set_queue_limit("tight", 1)
        for n in (1, 2):
            runner.submit(CALCULATOR, "What is 2 + 2?", id=f"tight-{n}", queue="tight")
        taken = leases.claim_some(
            runner.engine, limit=1, owner="elsewhere:1:1", lease_seconds=600, max_resumes=3
        )
    assert [claim.run.id for claim in taken] == ["tight-1"]
    worker = Worker(db_url, once=True, poll=0.02)
    serving = threading.Thread(target=worker.serve, daemon=True)
    serving.start()
    serving.join(GENEROUS)
    assert not serving.is_alive(), "the drain waited for a run it cannot take"
    assert worker.finished == 0
    with Runner(db_url) as runner:
        assert runner.row("tight-2").status == "queued"
