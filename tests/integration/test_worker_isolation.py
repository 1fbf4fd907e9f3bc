"""A worker runs a suspect alone: a run taken over with nothing recorded since its last
takeover (it may be what kills its workers) never has a neighbour beside it, so no innocent
run dies with it and is counted towards crash_loop; and a run that did progress is no
suspect, however it was taken over.

The worker's claims are made one turn at a time, from the test (each turn one transaction,
a batch of up to the worker's free slots), and its runs are held in their model call by a
gate: "nothing else was claimed" is then a fact, not a wait that was long enough.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text, update

from runner.core.agent import load_agent
from runner.service.worker import Worker
from runner.sql import leases
from runner.sql import runs as store
from runner.sql.schema import runs

from .agents import GATED_REF
from .support import DEAD_OWNER, died_with


class Lines(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Stepped:
    """A Worker whose serving loop the test turns by hand, one claim at a time."""

    def __init__(self, url: str) -> None:
        self.lines: list[str] = []
        self.worker = Worker(url, concurrency=4, lease_seconds=30)
        # The worker's log lines (the test reads them), through the logging module.
        self.handler = Lines(self.lines)
        logger = logging.getLogger("runner.worker")
        logger.addHandler(self.handler)
        logger.setLevel(logging.INFO)
        self.pool = ThreadPoolExecutor(4, thread_name_prefix="test-run")

    @property
    def engine(self) -> Engine:
        return self.worker.runner.engine

    def claim(self) -> list[str]:
        """One turn of the serving loop's claim: the runs it took, in the order taken."""
        self.worker._reap()
        before = set(self.worker._active)
        self.worker._claim_into(self.pool)
        return [run_id for run_id in self.worker._active if run_id not in before]

    def finish(self, run_id: str) -> None:
        self.worker._active[run_id].result(timeout=30)
        self.worker._reap()

    def close(self) -> None:
        logging.getLogger("runner.worker").removeHandler(self.handler)
        self.pool.shutdown(wait=True)
        self.worker.runner.close()


@pytest.fixture
def gate() -> Iterator[Any]:
    # The very object the worker's runs call: the loader caches the agent file's module.
    model = load_agent(GATED_REF).model
    model.reset()
    yield model
    model.open_all()  # whatever a failed test left held goes on and ends


@pytest.fixture
def stepped(db_url: str, gate: Any) -> Iterator[Stepped]:
    worker = Stepped(db_url)
    try:
        yield worker
    finally:
        gate.open_all()
        worker.close()


def queued(engine: Engine, run_id: str) -> None:
    assert store.create_run(
        engine,
        run_id=run_id,
        agent=GATED_REF,
        agent_name=None,
        release=None,
        task=run_id,
        budgets={},
    )


def expire(engine: Engine, run_id: str) -> None:
    past = datetime.now(UTC) - timedelta(seconds=5)
    with engine.begin() as connection:
        connection.execute(update(runs).where(runs.c.id == run_id).values(lease_expires_at=past))


def progressed(engine: Engine, run_id: str) -> None:
    """A run whose worker died after recording its task: its takeover is no suspect's.

    Its journal holds the task, so the claiming worker writes nothing before its model
    call returns."""
    died_with(engine, run_id, run_id, [], agent=GATED_REF)
    expire(engine, run_id)


def suspect(engine: Engine, run_id: str) -> None:
    """A run taken over once more by a worker that then died recording nothing."""
    died_with(engine, run_id, run_id, [], agent=GATED_REF)
    leases.claim_run(engine, run_id, owner=DEAD_OWNER, lease_seconds=3600, max_resumes=3)
    expire(engine, run_id)


def stalled(engine: Engine, run_id: str) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT stalled_resumes FROM runs WHERE id = :id"), {"id": run_id}
            ).scalar_one()
        )


def holder(engine: Engine, run_id: str) -> str | None:
    return store.find_run(engine, run_id).lease_owner


def test_a_suspect_runs_alone_until_it_records_an_entry(stepped: Stepped, gate: Any) -> None:
    engine = stepped.engine
    suspect(engine, "a-suspect")
    queued(engine, "b-queued")

    assert stepped.claim() == ["a-suspect"]  # alone: the batch ends with it
    assert stalled(engine, "a-suspect") == 1
    assert any("running it alone" in line for line in stepped.lines), stepped.lines
    assert gate.entered("a-suspect", 1)
    # In flight and still without a new entry: nothing is claimed beside it.
    assert stepped.claim() == []
    assert store.find_run(engine, "b-queued").status == "queued"

    gate.open("a-suspect", 1)
    assert gate.entered("a-suspect", 2)  # its step 1 is journaled: it is a suspect no more
    assert stepped.claim() == ["b-queued"]
    assert stalled(engine, "b-queued") == 0


def test_a_busy_worker_leaves_a_suspect_until_it_is_idle(stepped: Stepped, gate: Any) -> None:
    engine = stepped.engine
    progressed(engine, "a-neighbour")
    suspect(engine, "b-suspect")
    queued(engine, "c-queued")

    # The batch stops at the suspect: not beside the run it took, nor the run behind it.
    assert stepped.claim() == ["a-neighbour"]
    assert gate.entered("a-neighbour", 1)
    # The oldest runnable run is a suspect: a worker with a run in flight takes nothing (not
    # the run behind it either, so that busy workers drain and an idle one takes it).
    assert stepped.claim() == []
    assert holder(engine, "b-suspect") == DEAD_OWNER
    assert holder(engine, "c-queued") is None

    gate.open("a-neighbour", 1, 2)
    stepped.finish("a-neighbour")
    assert stepped.claim() == ["b-suspect"]
    assert gate.entered("b-suspect", 1)
    # The suspect's neighbour was never taken over without progress.
    assert stalled(engine, "a-neighbour") == 0
    assert store.find_run(engine, "a-neighbour").stop_reason == "final"


def test_runs_that_progressed_run_side_by_side(stepped: Stepped, gate: Any) -> None:
    engine = stepped.engine
    progressed(engine, "a-progressed")
    progressed(engine, "b-progressed")
    queued(engine, "c-queued")

    # Taken over, but they had progressed before: no suspects, so one batch takes them
    # side by side with the queued run.
    assert stepped.claim() == ["a-progressed", "b-progressed", "c-queued"]
    assert all(gate.entered(r, 1) for r in ("a-progressed", "b-progressed", "c-queued"))
    assert not any("running it alone" in line for line in stepped.lines), stepped.lines
    assert [stalled(engine, r) for r in ("a-progressed", "b-progressed", "c-queued")] == [0] * 3


def test_a_worker_never_takes_over_a_run_it_is_executing(stepped: Stepped, gate: Any) -> None:
    # Its lease lapsed while its worker still executes it: a heartbeat held up by a loaded
    # machine. Taking it again would run it twice in one process: the model asked the same
    # step again, a pending tool call run a second time. (Seen under load: a worker claimed
    # epochs 2 and 3 of one run, and asked its model step 3 twice.)
    engine = stepped.engine
    queued(engine, "a-running")
    assert stepped.claim() == ["a-running"]
    assert gate.entered("a-running", 1)
    expire(engine, "a-running")
    queued(engine, "b-queued")

    assert stepped.claim() == ["b-queued"]  # the lapsed lease is passed over, not taken
    row = store.find_run(engine, "a-running")
    assert (row.lease_epoch, row.resumes, row.lease_owner) == (1, 0, stepped.worker.name)

    for run_id in ("a-running", "b-queued"):
        gate.open(run_id, 1, 2)
        stepped.finish(run_id)
    row = store.find_run(engine, "a-running")
    assert (row.stop_reason, row.lease_epoch, row.resumes) == ("final", 1, 0)
    assert not any("abandoned" in line for line in stepped.lines), stepped.lines
