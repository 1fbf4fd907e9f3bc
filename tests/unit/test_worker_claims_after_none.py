"""After a claim that took nothing, a worker does not claim again at each of its runs' ends
(a drain's last second made a claim per run's end): a run's end prompts the next claim no
sooner than EMPTY_CLAIM_PAUSE after it; any other wake-up, and a worker left with no run,
claims at once."""

from __future__ import annotations

import time
from concurrent.futures import Future

from runner.service.worker import EMPTY_CLAIM_PAUSE, Worker
from runner.testing import InMemoryStore


def worker_with_a_run() -> Worker:
    worker = Worker(store=InMemoryStore(), concurrency=4)
    worker._active["r1"] = Future()
    return worker


def test_a_runs_end_just_after_a_claim_of_nothing_waits_out_the_pause() -> None:
    worker = worker_with_a_run()
    worker._found_none_at = time.monotonic()
    assert 0 < worker._pausing(ended=1) <= EMPTY_CLAIM_PAUSE


def test_any_other_wake_up_claims_at_once() -> None:
    worker = worker_with_a_run()
    worker._found_none_at = time.monotonic()
    assert worker._pausing(ended=0) == 0  # a NOTIFY, the poll: nothing ended


def test_a_worker_left_with_no_run_claims_at_once() -> None:
    worker = worker_with_a_run()
    worker._found_none_at = time.monotonic()
    worker._active.clear()  # a drain then ends, and a suspect waits for an idle worker
    assert worker._pausing(ended=1) == 0


def test_the_pause_counts_from_the_claim_of_nothing_and_not_after_one_that_took_runs() -> None:
    worker = worker_with_a_run()
    worker._found_none_at = time.monotonic() - EMPTY_CLAIM_PAUSE
    assert worker._pausing(ended=1) == 0
    worker._found_none_at = None  # the last claim took runs
    assert worker._pausing(ended=1) == 0
