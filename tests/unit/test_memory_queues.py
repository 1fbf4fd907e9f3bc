"""Queue limits on the in-memory store, where runs are claimed: a limit holds claims back
until a place frees, counts only live leases, holds a queue at 0 and goes with None; a
waiting run holds no place; a batch never takes a queue past its limit. Bulk submits check
every item first. The races of claimers at once stay in tests/integration."""

from __future__ import annotations

from typing import Any

import pytest

from runner import Agent, RunConflict
from runner.errors import SubmissionRefused
from runner.testing import FunctionModel, call, final, tool_results

from .memory_agents import SOLVER
from .store_support import ELSEWHERE, LEASE, batch, claim, claimed_ids, finish, memory_runner


def test_a_limit_holds_back_claims_until_a_place_frees() -> None:
    runner, store, clock = memory_runner()
    runner.set_queue_limit("small", 2)
    for i in range(4):
        runner.submit(SOLVER, f"task {i}", id=f"small-{i}", queue="small")
        clock.advance(0.001)
    runner.submit(SOLVER, "other", id="other", queue="other")
    assert claimed_ids(store, queues=["small"]) == ["small-0", "small-1"]
    assert claimed_ids(store) == ["other"]  # another queue is not held back
    finish(store, "small-0")
    assert claimed_ids(store) == ["small-2"]
    (small,) = [q for q in runner.queues() if q.name == "small"]
    assert (small.limit, small.queued, small.running) == (2, 1, 2)


def test_a_batch_never_takes_a_queue_past_its_limit() -> None:
    runner, store, clock = memory_runner()
    runner.set_queue_limit("tight", 3)
    runner.submit_many(
        SOLVER, [{"task": f"t{i}", "id": f"tight-{i}", "queue": "tight"} for i in range(10)]
    )
    clock.advance(1)
    runner.submit(SOLVER, "open", id="open-0", queue="open")
    # The three oldest of the limited queue, then the other queue is not held back.
    assert batch(store, 10) == ["tight-0", "tight-1", "tight-2", "open-0"]
    assert batch(store, 10) == []
    finish(store, "tight-1")
    assert batch(store, 10) == ["tight-3"]
    (tight,) = [q for q in runner.queues() if q.name == "tight"]
    assert (tight.running, tight.queued) == (3, 6)


def test_an_expired_lease_frees_its_place_and_its_resumption_takes_one() -> None:
    runner, store, clock = memory_runner()
    runner.set_queue_limit("two", 2)
    for i in range(4):
        runner.submit(SOLVER, f"t{i}", id=f"two-{i}", queue="two")
        clock.advance(0.001)
    assert batch(store, 2, owner=ELSEWHERE) == ["two-0", "two-1"]
    # Both holders died on another machine: their runs are runnable again, first in line,
    # and their resumptions take the queue's places, not two-2 beside them.
    clock.advance(LEASE + 1)
    taken = store.claim_some(limit=10, owner="other:2:2", lease_seconds=LEASE, max_resumes=3)
    # Their tasks, journaled by the claim, were progress: no suspect among them.
    assert [(c.run.id, c.run.resumes, c.stalled) for c in taken] == [
        ("two-0", 1, 0),
        ("two-1", 1, 0),
    ]
    assert batch(store, 10) == []  # two-2 waits for a place


def test_a_limit_of_zero_holds_a_queue_and_none_removes_the_limit() -> None:
    runner, store, _ = memory_runner()
    runner.set_queue_limit("held", 0)
    runner.submit(SOLVER, "t", id="held-1", queue="held")
    assert claim(store) is None
    runner.set_queue_limit("held", None)
    assert claimed_ids(store) == ["held-1"]
    (held,) = runner.queues()
    assert (held.name, held.limit, held.running) == ("held", None, 1)
    with pytest.raises(ValueError, match="limit"):
        runner.set_queue_limit("held", -1)
    with pytest.raises(ValueError, match="queue"):
        runner.set_queue_limit("no spaces", 1)


def test_a_waiting_run_holds_no_place() -> None:
    runner, store, clock = memory_runner()
    runner.set_queue_limit("q", 1)
    runner.submit(SOLVER, "w", id="waits", queue="q")
    clock.advance(0.001)
    runner.submit(SOLVER, "n", id="next", queue="q")
    assert claimed_ids(store) == ["waits"]
    store.runs["waits"].update(status="waiting", lease_owner=None, lease_expires_at=None)
    assert claimed_ids(store) == ["next"]
    (q,) = runner.queues()
    assert (q.running, q.waiting, q.queued) == (1, 1, 0)


def test_delayed_runs_are_counted_apart() -> None:
    runner, _, _ = memory_runner()
    runner.submit(SOLVER, "now", queue="d")
    runner.submit(SOLVER, "later", queue="d", delay=60)
    (d,) = runner.queues()
    assert (d.queued, d.delayed, d.running, d.waiting, d.limit) == (1, 1, 0, 0, None)


# -- bulk submit ---------------------------------------------------------------------------------


def test_submit_many_keeps_the_order_given_for_equal_priorities() -> None:
    runner, store, _ = memory_runner()
    tasks: list[Any] = [f"task {i}" for i in range(30)]
    tasks[7] = {"task": "urgent", "id": "urgent", "priority": 5, "queue": "bulk"}
    tasks[8] = {"task": "later", "id": "later", "delay": 600, "budgets": {"max_steps": 3}}
    done = runner.submit_many(SOLVER, tasks, batch_size=7)
    assert done.created == 30 and done.existing == [] and done.ids[7:9] == ["urgent", "later"]
    rows = {row.id: row for row in runner.list(limit=100)}
    assert (rows["urgent"].queue, rows["urgent"].priority) == ("bulk", 5)
    assert rows["later"].not_before is not None and rows["later"].budgets["max_steps"] == 3
    assert batch(store, 3, queues=["default"]) == done.ids[:3]


def test_a_bad_item_is_named_and_nothing_is_submitted() -> None:
    runner, _, _ = memory_runner()
    for bad, says in [
        ({"task": 5}, "task must be a string"),
        ({"task": "t", "budgets": {"max_stepz": 1}}, "unknown budget max_stepz"),
        ({"task": "t", "priority": "high"}, "priority must be a whole number"),
        ({"task": "t", "surprise": 1}, "unknown field surprise"),
        ({"task": "t", "id": "has space"}, "run id"),
        ({"task": "t", "id": "twice"}, "given twice"),
    ]:
        tasks: list[Any] = ["fine", {"task": "t", "id": "twice"}, bad]
        with pytest.raises(SubmissionRefused, match=says) as refused:
            runner.submit_many(SOLVER, tasks)
        assert refused.value.item == 3
        assert runner.list() == []


def test_existing_ids_the_same_request_is_kept_another_is_refused() -> None:
    runner, _, _ = memory_runner()
    runner.submit(SOLVER, "kept", id="kept", queue="q", priority=2)
    again = runner.submit_many(SOLVER, ["new", {"task": "kept", "id": "kept", "queue": "q"}])
    assert again.existing == ["kept"] and again.created == 1
    with pytest.raises(SubmissionRefused, match="another task") as refused:
        runner.submit_many(SOLVER, ["fresh", {"task": "changed", "id": "kept"}])
    assert refused.value.item == 2
    assert len(runner.list()) == 2  # "fresh" was not submitted


def test_queue_and_priority_are_part_of_the_request_when_given() -> None:
    runner, _, _ = memory_runner()
    runner.submit(SOLVER, "t", id="placed", queue="q", priority=1, delay=60)
    assert runner.submit(SOLVER, "t", id="placed") == "placed"  # neither given: fine
    assert runner.submit(SOLVER, "t", id="placed", queue="q", delay=120) == "placed"
    with pytest.raises(RunConflict) as conflict:
        runner.submit(SOLVER, "t", id="placed", queue="other", priority=3)
    assert conflict.value.differences == {"queue": ("q", "other"), "priority": (1, 3)}


def test_a_fork_waits_in_its_parents_queue() -> None:
    model = FunctionModel(
        lambda t: (
            final(tool_results(t)[-1]["content"]) if tool_results(t) else call("add", a=1, b=2)
        )
    )
    agent = Agent(model, {"add": lambda a, b: a + b}, name="two", ref=SOLVER)
    runner, _, _ = memory_runner()
    runner.submit(agent, "t", id="parent", queue="q", priority=4)
    runner.resume("parent", agent=agent)
    forked = runner.fork("parent", 1, id="child")
    assert (runner.row(forked).queue, runner.row(forked).priority) == ("q", 4)
