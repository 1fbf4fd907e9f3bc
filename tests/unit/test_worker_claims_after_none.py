"""After a claim that took nothing, a worker does not claim again at each of its runs' ends
(a drain's last second made a claim per run's end): a run's end prompts the next claim no
sooner than EMPTY_CLAIM_PAUSE after it, twice that after two such claims in a row, and so
on up to EMPTY_CLAIM_PAUSE_MOST; any other wake-up, and a worker left with no run, claims at
once."""

from __future__ import annotations

import time

from runner.service.claim_pacing import EMPTY_CLAIM_PAUSE, EMPTY_CLAIM_PAUSE_MOST, ClaimPacing


def after_a_claim_of_nothing() -> ClaimPacing:
    pacing = ClaimPacing(4)
    pacing.claimed(0, free=4)
    return pacing


def test_a_runs_end_just_after_a_claim_of_nothing_waits_out_the_pause() -> None:
    pacing = after_a_claim_of_nothing()
    assert 0 < pacing.pausing(ended=1, running=1, stopping=False) <= EMPTY_CLAIM_PAUSE


def test_any_other_wake_up_claims_at_once() -> None:
    pacing = after_a_claim_of_nothing()
    assert pacing.pausing(ended=0, running=1, stopping=False) == 0  # a NOTIFY, the poll


def test_a_worker_left_with_no_run_claims_at_once() -> None:
    pacing = after_a_claim_of_nothing()
    # A drain then ends, and a suspect waits for an idle worker.
    assert pacing.pausing(ended=1, running=0, stopping=False) == 0


def test_the_pause_counts_from_the_claim_of_nothing_and_not_after_one_that_took_runs() -> None:
    pacing = after_a_claim_of_nothing()
    pacing.found_none_at = time.monotonic() - EMPTY_CLAIM_PAUSE
    assert pacing.pausing(ended=1, running=1, stopping=False) == 0
    pacing.claimed(2, free=4)  # the last claim took runs
    assert pacing.pausing(ended=1, running=1, stopping=False) == 0


def test_each_claim_of_nothing_in_a_row_doubles_the_pause_up_to_its_most() -> None:
    pacing = ClaimPacing(4)
    pauses = []
    for _ in range(5):
        pacing.claimed(0, free=4)
        pauses.append(pacing.pause_after_none)
        assert 0 < pacing.pausing(ended=1, running=1, stopping=False) <= pacing.pause_after_none
    most = EMPTY_CLAIM_PAUSE_MOST
    assert pauses == [EMPTY_CLAIM_PAUSE, 2 * EMPTY_CLAIM_PAUSE, most, most, most]
    assert most == 4 * EMPTY_CLAIM_PAUSE


def test_a_claim_that_took_runs_starts_the_pauses_over() -> None:
    pacing = ClaimPacing(4)
    for _ in range(4):
        pacing.claimed(0, free=4)
    pacing.claimed(1, free=4)
    pacing.claimed(0, free=3)
    assert 0 < pacing.pausing(ended=1, running=1, stopping=False) <= EMPTY_CLAIM_PAUSE
