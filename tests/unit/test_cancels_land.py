"""Cancels that land, on the in-memory store (the SQL stores: tests/integration and
tests/acceptance/test_cancels_land.py): a cancelled run whose worker died holding it is
finished by any live worker once its lease lapses, whatever queues that worker serves, and
a run cancelled before its first step journals its task."""

from __future__ import annotations

import threading

from runner.core.journal import EntryKind
from runner.core.status import RunStatus
from runner.service.worker import Worker
from tests.conditions import wait_until

from .memory_agents import solver_agent
from .store_support import ELSEWHERE, LEASE, claim, memory_runner


def test_any_worker_finishes_a_cancelled_run_once_its_dead_holder_s_lease_lapses() -> None:
    runner, store, clock = memory_runner()
    run_id = runner.submit(solver_agent, "2+3?")
    held = claim(store, owner=ELSEWHERE)  # a worker on another host, which then died
    assert held is not None and held.run.id == run_id
    runner.cancel(run_id)
    assert runner.row(run_id).status is RunStatus.RUNNING  # its lease lives: only asked
    # A live worker of another queue: it will never claim the run, but finishes its cancel.
    worker = Worker(store=store, queues=["elsewhere"], poll=0.01, lease_seconds=LEASE)
    serving = threading.Thread(target=worker.serve)
    serving.start()
    try:
        clock.advance(LEASE + 1)
        wait_until(
            lambda: runner.row(run_id).status is RunStatus.FINISHED,
            timeout=10,
            what="the cancel to land",
        )
    finally:
        worker.stopping.set()
        worker._wake.set()
        serving.join()
    row = runner.row(run_id)
    assert (row.stop_reason, row.lease_epoch, row.lease_owner) == (
        "cancelled",
        held.epoch + 1,
        None,
    )
    assert [entry.kind for entry in runner.journal(run_id)] == [EntryKind.TASK]


def test_a_run_cancelled_before_its_first_step_journals_its_task() -> None:
    runner, _store, _clock = memory_runner()
    run_id = runner.submit(solver_agent, "2+3?")
    assert runner.cancel(run_id).stop_reason == "cancelled"
    [task] = runner.journal(run_id)
    assert (task.kind, task.step, task.content) == (EntryKind.TASK, 0, "2+3?")
