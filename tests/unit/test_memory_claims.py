"""Claims on the in-memory store, as a worker makes them: priority then age, the queues a
worker serves, delays on the store's clock, batches, suspects alone, takeovers counted and
crash_loop, fencing. The same rules the SQL claims obey (the contract test runs them on
both databases too); the races between claimers stay in tests/integration."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runner import Agent, LeaseHeld, LeaseLost, StopReason
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.status import RunStatus

from .memory_agents import SOLVER
from .store_support import (
    ELSEWHERE,
    LEASE,
    OWNER,
    batch,
    claim,
    claimed_ids,
    finish,
    memory_runner,
)


def test_priorities_order_the_claims_then_age() -> None:
    runner, store, clock = memory_runner()
    for run_id, priority in [("p0-old", 0), ("p5", 5), ("p-3", -3), ("p0-new", 0), ("p9", 9)]:
        runner.submit(SOLVER, f"task {run_id}", id=run_id, priority=priority)
        clock.advance(0.001)
    assert batch(store, 3) == ["p9", "p5", "p0-old"]
    assert batch(store, 10) == ["p0-new", "p-3"]
    assert batch(store, 10) == []
    assert {(row.status, row.lease_owner) for row in runner.list()} == {("running", OWNER)}


def test_a_claim_serves_only_the_queues_it_is_given() -> None:
    runner, store, _ = memory_runner()
    runner.submit(SOLVER, "a", id="in-a", queue="a")
    runner.submit(SOLVER, "b", id="in-b", queue="b", priority=100)
    runner.submit(SOLVER, "d", id="in-default")
    assert claimed_ids(store, queues=["a", "c"]) == ["in-a"]
    assert claimed_ids(store, queues=["default"]) == ["in-default"]
    assert runner.row("in-b").status is RunStatus.QUEUED
    assert claimed_ids(store) == ["in-b"]  # no queues given: every queue


def test_a_delayed_run_is_never_claimed_before_its_time() -> None:
    runner, store, clock = memory_runner()
    runner.submit(SOLVER, "now", id="now-1")
    runner.submit(SOLVER, "later", id="later", delay=3600, priority=100)
    start = runner.row("later").not_before
    assert start is not None and (start - runner.now()).total_seconds() == 3600
    assert batch(store, 10) == ["now-1"]
    finish(store, "now-1")
    clock.advance(3599.9)
    assert claim(store) is None
    clock.advance(0.1)  # not_before <= now: due
    assert claimed_ids(store) == ["later"]


def test_a_lapsed_lease_is_not_taken_over_by_the_claimer_executing_the_run() -> None:
    # Its heartbeat was held up past the lease; the claimer still runs it (`executing`).
    runner, store, clock = memory_runner()
    runner.submit(SOLVER, "busy", id="busy")
    runner.submit(SOLVER, "next", id="next")
    clock.advance(0.001)
    assert batch(store, 1) == ["busy"]
    clock.advance(LEASE + 1)
    assert claimed_ids(store, executing={"busy"}) == ["next"]
    assert runner.row("busy").lease_epoch == 1
    taken = claim(store, owner=ELSEWHERE)  # another claimer: the lease says its holder is gone
    assert taken is not None and (taken.run.id, taken.epoch) == ("busy", 2)


def test_a_run_due_in_the_past_or_given_not_before_starts_at_once() -> None:
    runner, store, _ = memory_runner()
    past = datetime(2020, 1, 1, tzinfo=UTC)
    runner.submit(SOLVER, "overdue", id="overdue", not_before=past)
    assert runner.row("overdue").not_before == past
    assert claimed_ids(store) == ["overdue"]
    for bad, says in [
        ({"not_before": past, "delay": 5}, "not both"),
        ({"not_before": datetime(2030, 1, 1)}, "time zone"),
        ({"delay": -1}, "negative"),
        ({"queue": "no spaces"}, "queue"),
        ({"priority": 2**40}, "priority"),
    ]:
        with pytest.raises(ValueError, match=says):
            runner.submit(SOLVER, "x", **bad)  # type: ignore[arg-type]


def test_a_suspect_stops_a_batch_and_runs_alone() -> None:
    """A suspect (its last worker died before it wrote anything) is taken only by an idle
    worker and only alone: a batch stops before it, and one that takes it ends with it."""
    runner, store, clock = memory_runner()
    runner.submit(SOLVER, "suspect", id="suspect", priority=5)
    assert batch(store, 1, owner=ELSEWHERE) == ["suspect"]  # its task journaled by the claim
    clock.advance(LEASE + 1)  # its worker died before the run wrote an entry
    assert batch(store, 1, owner=ELSEWHERE) == ["suspect"]  # the task was progress: no suspect
    clock.advance(LEASE + 1)  # this worker died too, with nothing written since its claim
    runner.submit(SOLVER, "first", id="first", priority=9)
    runner.submit(SOLVER, "after", id="after", priority=0)
    clock.advance(0.001)
    runner.submit(SOLVER, "last", id="last", priority=0)
    assert batch(store, 10) == ["first"]  # stopped at the suspect, next in order
    assert batch(store, 10, suspects=False) == []  # a busy worker leaves it
    taken = store.claim_some(limit=10, owner=OWNER, lease_seconds=LEASE, max_resumes=3)
    assert [(c.run.id, c.stalled, c.crash_loop) for c in taken] == [("suspect", 1, False)]
    assert taken[0].run.resumes == 2
    assert batch(store, 10) == ["after", "last"]


def test_takeovers_without_progress_end_in_crash_loop() -> None:
    runner, store, clock = memory_runner()
    runner.submit(SOLVER, "dies", id="dies")
    stalls = []
    for _ in range(5):
        taken = store.claim_some(limit=1, owner=ELSEWHERE, lease_seconds=LEASE, max_resumes=2)
        assert len(taken) == 1
        stalls.append((taken[0].stalled, taken[0].crash_loop))
        clock.advance(LEASE + 1)  # each holder dies before it writes
    # The first claim journaled the run's task: the takeover after it found that progress
    # (as it found the task a run writes as it starts); the next ones found none.
    assert stalls == [(0, False), (0, False), (1, False), (2, False), (3, True)]
    row = runner.row("dies")
    assert (row.status, row.stop_reason, row.resumes) == ("finished", "crash_loop", 4)
    assert "max_resumes 2" in str(row.error)


def test_a_takeover_after_progress_is_no_stall() -> None:
    runner, store, clock = memory_runner()
    runner.submit(SOLVER, "t", id="t")
    first = store.claim_run("t", lease_seconds=LEASE, max_resumes=3, owner=ELSEWHERE)
    with store.open_journal(first, lease_seconds=LEASE) as journal:
        journal.append(Entry(EntryKind.TASK, 0, Counters(), content="t"))
    clock.advance(LEASE + 1)
    second = store.claim_run("t", lease_seconds=LEASE, max_resumes=3)
    assert (second.epoch, second.stalled, second.run.resumes, second.next_seq) == (2, 0, 1, 1)


def test_a_live_lease_refuses_a_claim_unless_stolen_and_steal_fences_the_holder() -> None:
    runner, store, _ = memory_runner()
    runner.submit(SOLVER, "held", id="held")
    first = store.claim_run("held", lease_seconds=LEASE, max_resumes=3, owner=ELSEWHERE)
    with pytest.raises(LeaseHeld, match="steal"):
        store.claim_run("held", lease_seconds=LEASE, max_resumes=3)
    with pytest.raises(LeaseHeld):
        runner.resume("held")
    zombie = store.open_journal(first, lease_seconds=LEASE)
    zombie.append(Entry(EntryKind.TASK, 0, Counters(), content="held"))
    stolen = store.claim_run("held", lease_seconds=LEASE, max_resumes=3, steal=True)
    assert stolen.epoch == first.epoch + 1
    with pytest.raises(LeaseLost):
        zombie.append(Entry(EntryKind.FINAL, 1, Counters(steps=1), content="zombie"))
    with pytest.raises(LeaseLost):
        zombie.finish(Stop(StopReason.FINAL, output="zombie"), Counters(steps=1))
    assert [e.kind for e in runner.journal("held")] == ["task"]
    result = runner.execute(stolen, Agent(lambda t: {"type": "final", "content": "mine"}, {}))
    assert (result.output, runner.row("held").lease_epoch) == ("mine", 2)
    assert [epoch for _, epoch in store.load_entries("held")] == [1, 2]


def test_release_gives_a_run_back_only_under_its_epoch() -> None:
    runner, store, _ = memory_runner()
    runner.submit(SOLVER, "r", id="r")
    taken = claim(store)
    assert taken is not None
    store.release_run("r", taken.epoch + 1)  # a stale holder: nothing happens
    assert runner.row("r").status is RunStatus.RUNNING
    store.release_run("r", taken.epoch, "could not load")
    row = runner.row("r")
    assert (row.status, row.lease_owner, row.error) == ("queued", None, "could not load")


def test_skipped_agents_are_left_for_other_workers() -> None:
    runner, store, _ = memory_runner()
    runner.submit(SOLVER, "s", id="s")
    assert batch(store, 10, skip_agents=[SOLVER]) == []
    assert batch(store, 10, skip_agents=["other.py:agent"]) == ["s"]


def test_a_cancel_finishes_an_unheld_run_at_once_and_flags_a_held_one() -> None:
    runner, store, _ = memory_runner()
    runner.submit(SOLVER, "q", id="q")
    runner.submit(SOLVER, "h", id="h")
    assert runner.cancel("q").stop_reason == "cancelled"
    assert runner.row("q").lease_epoch == 1  # fences out a holder that only seemed dead
    held = store.claim_run("h", lease_seconds=LEASE, max_resumes=3)
    assert runner.cancel("h").stop_reason is None
    with store.open_journal(held, lease_seconds=LEASE) as journal:
        journal.append(Entry(EntryKind.TASK, 0, Counters(), content="h"))
        assert journal.cancel_requested()  # told by the write, as the SQL journal's


def test_a_worker_drains_the_queue_on_the_memory_store() -> None:
    from runner.service.worker import Worker

    runner, store, _ = memory_runner()
    for i in range(5):
        runner.submit(SOLVER, f"task {i}", id=f"w{i}", priority=i % 2)
    worker = Worker(store=store, concurrency=2, once=True, poll=0.01)
    worker.serve()
    assert worker.finished == 5
    rows = runner.list()
    assert {(row.status, row.stop_reason, row.output) for row in rows} == {
        ("finished", "final", "5")
    }


def test_a_backed_up_worker_gathers_a_few_free_slots_before_claiming() -> None:
    """With runs waiting in the queue, a worker of many runs at once does not claim for
    every run that ends (a claim costs about the same for one run as for several): it waits
    for an eighth of its slots, or CLAIM_GATHER_SECONDS, whichever comes first."""
    from runner.service.claim_pacing import CLAIM_GATHER_SECONDS, ClaimPacing
    from runner.service.worker import Worker

    pacing = ClaimPacing(16)
    assert pacing.gathering(0, stopping=False) == 0  # nothing claimed yet: not backed up
    pacing.backed_up = True
    first = pacing.gathering(15, stopping=False)
    # One slot free of 16: wait. (free_since + 0.02 - now, in floats, may round a hair
    # above 0.02 when free_since == now, depending on the monotonic clock's value.)
    assert 0 < first <= CLAIM_GATHER_SECONDS + 1e-9
    pacing.free_since = 0.0  # long ago: waited enough
    assert pacing.gathering(15, stopping=False) == 0
    pacing.free_since = None
    assert pacing.gathering(14, stopping=False) == 0  # two free, an eighth of 16: claim now
    assert pacing.gathering(15, stopping=True) == 0  # a worker that stops does not wait

    runner, store, _ = memory_runner()
    for i in range(40):
        runner.submit(SOLVER, f"task {i}", id=f"g{i}")
    worker = Worker(store=store, concurrency=16, once=True, poll=0.01)
    worker.serve()  # and a worker of 16 slots drains the queue all the same
    assert worker.finished == 40
