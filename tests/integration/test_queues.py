"""Queues, priorities, delays and limits, where runs are claimed, on both databases.

Claims are made one at a time with `leases.claim_some`, as a worker makes them, on the
runner's own clock (the database's on PostgreSQL); a delayed run is checked against that
clock moved by a few milliseconds either side of its start, so no test sleeps.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from runner import Agent, RunConflict, Runner
from runner.core.clock import Clock
from runner.core.status import RunStatus
from runner.errors import SubmissionRefused
from runner.store import leases
from runner.store.schema import runs

from .support import expire

AGENTS = Path(__file__).resolve().with_name("agents.py")
AGENT = f"{AGENTS}:solver_agent"


class Shifted:
    """Another clock moved by `seconds`: the database's clock, read a little later."""

    def __init__(self, base: Clock, seconds: float) -> None:
        self.base, self.seconds = base, seconds

    def time(self) -> float:
        return self.base.time() + self.seconds

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)


def claim(runner: Runner, owner: str = "tester:1:1", **kwargs: Any) -> leases.Claim | None:
    kwargs.setdefault("clock", runner.clock)
    taken = leases.claim_some(
        runner.engine, limit=1, owner=owner, lease_seconds=30, max_resumes=3, **kwargs
    )
    return taken[0] if taken else None


def claimed_ids(runner: Runner, **kwargs: Any) -> list[str]:
    found = []
    while (taken := claim(runner, **kwargs)) is not None:
        found.append(taken.run.id)
    return found


def finish(runner: Runner, run_id: str) -> None:
    with runner.engine.begin() as connection:
        connection.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(status=RunStatus.FINISHED, lease_owner=None, lease_expires_at=None)
        )


# -- priorities, queues and delays -----------------------------------------------------------


def test_priorities_order_the_claims_then_age(db_url: str) -> None:
    with Runner(db_url) as runner:
        for run_id, priority in [("p0-old", 0), ("p5", 5), ("p-3", -3), ("p0-new", 0), ("p9", 9)]:
            runner.submit(AGENT, f"task {run_id}", id=run_id, priority=priority)
        assert claimed_ids(runner) == ["p9", "p5", "p0-old", "p0-new", "p-3"]


def test_a_claim_serves_only_the_queues_it_is_given(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(AGENT, "a", id="in-a", queue="a")
        runner.submit(AGENT, "b", id="in-b", queue="b", priority=100)
        runner.submit(AGENT, "d", id="in-default")
        assert claimed_ids(runner, queues=["a", "c"]) == ["in-a"]
        assert claimed_ids(runner, queues=["default"]) == ["in-default"]
        assert runner.row("in-b").status is RunStatus.QUEUED
        assert claimed_ids(runner) == ["in-b"]  # no queues given: every queue


def test_a_delayed_run_is_never_claimed_before_its_time(db_url: str) -> None:
    with Runner(db_url) as runner:
        run_id = runner.submit(AGENT, "later", id="later", delay=3600)
        start = runner.row(run_id).not_before
        assert start is not None
        # Submitted an hour ahead on the database's clock.
        assert abs((start - runner.now()).total_seconds() - 3600) < 60
        ahead = (start - runner.now()).total_seconds()
        assert claim(runner) is None
        assert claim(runner, clock=Shifted(runner.clock, ahead - 0.05)) is None
        taken = claim(runner, clock=Shifted(runner.clock, ahead + 0.05))
        assert taken is not None and taken.run.id == "later"


def test_a_run_due_in_the_past_or_given_not_before_starts_at_once(db_url: str) -> None:
    with Runner(db_url) as runner:
        past = datetime(2020, 1, 1, tzinfo=UTC)
        runner.submit(AGENT, "overdue", id="overdue", not_before=past)
        assert runner.row("overdue").not_before == past
        assert claimed_ids(runner) == ["overdue"]
        with pytest.raises(ValueError, match="not both"):
            runner.submit(AGENT, "x", not_before=past, delay=5)
        with pytest.raises(ValueError, match="time zone"):
            runner.submit(AGENT, "x", not_before=datetime(2030, 1, 1))
        with pytest.raises(ValueError, match="negative"):
            runner.submit(AGENT, "x", delay=-1)
        with pytest.raises(ValueError, match="queue"):
            runner.submit(AGENT, "x", queue="no spaces")
        with pytest.raises(ValueError, match="priority"):
            runner.submit(AGENT, "x", priority=2**40)


# -- limits ----------------------------------------------------------------------------------


def test_a_limit_holds_back_claims_until_a_place_frees(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_queue_limit("small", 2)
        for i in range(4):
            runner.submit(AGENT, f"task {i}", id=f"small-{i}", queue="small")
        runner.submit(AGENT, "other", id="other", queue="other")
        assert claimed_ids(runner, queues=["small"]) == ["small-0", "small-1"]
        assert claimed_ids(runner) == ["other"]  # another queue is not held back
        finish(runner, "small-0")
        assert claimed_ids(runner) == ["small-2"]
        (small,) = [q for q in runner.queues() if q.name == "small"]
        assert (small.limit, small.queued, small.running) == (2, 1, 2)


def test_an_expired_lease_frees_its_place_and_its_resumption_takes_one(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_queue_limit("one", 1)
        runner.submit(AGENT, "first", id="first", queue="one")
        runner.submit(AGENT, "second", id="second", queue="one")
        assert claimed_ids(runner) == ["first"]
        expire(runner, "first")  # its worker died on another machine
        # The expired run is runnable again, and takes the queue's one place itself.
        taken = claim(runner, owner="other:2:2")
        assert taken is not None and (taken.run.id, taken.run.resumes) == ("first", 1)
        assert claim(runner) is None


def test_a_limit_of_zero_holds_a_queue_and_none_removes_the_limit(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_queue_limit("held", 0)
        runner.submit(AGENT, "t", id="held-1", queue="held")
        assert claim(runner) is None
        runner.set_queue_limit("held", None)
        assert claimed_ids(runner) == ["held-1"]
        (held,) = runner.queues()
        assert (held.name, held.limit, held.running) == ("held", None, 1)
        with pytest.raises(ValueError, match="limit"):
            runner.set_queue_limit("held", -1)


def test_a_waiting_run_holds_no_place(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_queue_limit("q", 1)
        runner.submit(AGENT, "w", id="waits", queue="q")
        runner.submit(AGENT, "n", id="next", queue="q")
        assert claimed_ids(runner) == ["waits"]
        with runner.engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id == "waits")
                .values(status=RunStatus.WAITING, lease_owner=None, lease_expires_at=None)
            )
        assert claimed_ids(runner) == ["next"]
        (q,) = runner.queues()
        assert (q.running, q.waiting, q.queued) == (1, 1, 0)


def test_claimers_at_once_never_exceed_a_limit(db_url: str) -> None:
    """Eight threads claim from one queue at once, each in its own transaction: on
    PostgreSQL each sees room in its own snapshot unless the queue's lock orders them."""
    with Runner(db_url) as runner:
        runner.set_queue_limit("tight", 3)
        runner.submit_many(AGENT, [{"task": f"t{i}", "queue": "tight"} for i in range(20)])
    start = threading.Barrier(8)
    taken: list[str] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        with Runner(db_url) as mine:
            start.wait(60)
            for _ in range(5):
                got = claim(mine, owner=f"claimer:{n}:1")
                if got is not None:
                    with lock:
                        taken.append(got.run.id)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(taken) == 3 and len(set(taken)) == 3


# -- bulk submit -----------------------------------------------------------------------------


def test_submit_many_inserts_in_batches_in_the_order_given(db_url: str) -> None:
    tasks: list[Any] = [f"task {i}" for i in range(2500)]
    tasks[7] = {"task": "urgent", "id": "urgent", "priority": 5, "queue": "bulk"}
    tasks[8] = {"task": "later", "id": "later", "delay": 600, "budgets": {"max_steps": 3}}
    with Runner(db_url) as runner:
        done = runner.submit_many(AGENT, tasks, batch_size=1000)
        assert done.created == 2500 and done.existing == [] and len(set(done.ids)) == 2500
        assert done.ids[7:9] == ["urgent", "later"]
        rows = {row.id: row for row in runner.list(limit=10_000)}
        assert len(rows) == 2500
        assert (rows["urgent"].queue, rows["urgent"].priority) == ("bulk", 5)
        assert rows["later"].not_before is not None and rows["later"].budgets["max_steps"] == 3
        assert rows[done.ids[0]].task == "task 0"
        # Equal priority: claimed in the order given, whatever the ids.
        first = [claim(runner, queues=["default"]) for _ in range(3)]
        assert [c.run.id for c in first if c] == done.ids[:3]


def test_a_bad_item_is_named_and_nothing_is_submitted(db_url: str) -> None:
    with Runner(db_url) as runner:
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
                runner.submit_many(AGENT, tasks)
            assert refused.value.item == 3
            assert runner.list() == []


def test_existing_ids_the_same_request_is_kept_another_is_refused(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(AGENT, "kept", id="kept", queue="q", priority=2)
        again = runner.submit_many(AGENT, ["new", {"task": "kept", "id": "kept", "queue": "q"}])
        assert again.existing == ["kept"] and again.created == 1
        with pytest.raises(SubmissionRefused, match="another task") as refused:
            runner.submit_many(AGENT, ["fresh", {"task": "changed", "id": "kept"}])
        assert refused.value.item == 2
        assert len(runner.list()) == 2  # "fresh" was not submitted


def test_a_batch_failing_midway_leaves_earlier_batches_and_nothing_of_itself(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process takes an id of the second batch after the check: that batch fails
    whole, the first stays, and the error says exactly what was submitted."""
    from runner.errors import SubmitInterrupted
    from runner.service import submissions
    from runner.store import runs as store

    real = store.existing_runs

    def checked_then_taken(engine: Any, run_ids: Any) -> Any:
        found = real(engine, run_ids)
        with Runner(db_url) as other:
            other.submit(AGENT, "someone else's", id="taken")
        return found

    monkeypatch.setattr(submissions.store, "existing_runs", checked_then_taken)
    tasks: list[Any] = [f"task {i}" for i in range(1500)]
    tasks[1200] = {"task": "mine", "id": "taken"}
    with Runner(db_url) as runner:
        with pytest.raises(SubmitInterrupted) as interrupted:
            runner.submit_many(AGENT, tasks, batch_size=1000)
        assert interrupted.value.item == 1001
        assert len(interrupted.value.submitted) == 1000
        assert "1000 runs before it were submitted" in str(interrupted.value)
        stored = {row.id for row in runner.list(limit=10_000)}
    assert stored == {*interrupted.value.submitted, "taken"}


# -- a run id names one request ----------------------------------------------------------------


def test_queue_and_priority_are_part_of_the_request_when_given(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="placed", queue="q", priority=1, delay=60)
        assert runner.submit(AGENT, "t", id="placed") == "placed"  # neither given: fine
        assert runner.submit(AGENT, "t", id="placed", queue="q", delay=120) == "placed"
        with pytest.raises(RunConflict) as conflict:
            runner.submit(AGENT, "t", id="placed", queue="other", priority=3)
        assert conflict.value.differences == {"queue": ("q", "other"), "priority": (1, 3)}


def test_a_fork_waits_in_its_parents_queue(db_url: str) -> None:
    agent = Agent(_two_steps, {"add": lambda a, b: a + b}, name="two", ref=AGENT)
    with Runner(db_url) as runner:
        runner.submit(agent, "t", id="parent", queue="q", priority=4)
        runner.resume("parent", agent=agent)
        forked = runner.fork("parent", 1, id="child")
        assert (runner.row(forked).queue, runner.row(forked).priority) == ("q", 4)


def _two_steps(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "add", "args": {"a": 1, "b": 2}}
    return {"type": "final", "content": seen[-1]["content"]}


# -- the exact edges of what the columns hold --------------------------------------------------

LOWEST, HIGHEST = -(2**31), 2**31 - 1  # runs.priority is int4 on PostgreSQL
LONGEST = "q" * 64  # runs.queue and queues.name hold 64 characters


def test_a_queue_name_of_64_and_priorities_at_int4s_ends_are_kept_exactly(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="high", queue=LONGEST, priority=HIGHEST)
        runner.submit(AGENT, "t", id="low", queue=LONGEST, priority=LOWEST)
        runner.set_queue_limit(LONGEST, 1)
        placed = [(runner.row(i).queue, runner.row(i).priority) for i in ("high", "low")]
        (listed,) = runner.queues()
    assert placed == [(LONGEST, HIGHEST), (LONGEST, LOWEST)]
    assert (listed.name, listed.limit) == (LONGEST, 1)


@pytest.mark.parametrize(
    ("placement", "says"),
    [
        ({"queue": "q" * 65}, f"queue '{'q' * 65}' must be 1 to 64 letters"),
        ({"priority": HIGHEST + 1}, f"priority must be between {LOWEST} and {HIGHEST}, got "
                                    f"{HIGHEST + 1}"),
        ({"priority": LOWEST - 1}, f"priority must be between {LOWEST} and {HIGHEST}, got "
                                   f"{LOWEST - 1}"),
    ],
)  # fmt: skip
def test_one_past_what_the_columns_hold_is_refused_and_nothing_written(
    db_url: str, placement: dict[str, Any], says: str
) -> None:
    """Issue 29: a 65-character queue name and a priority of 2**31 were accepted by a planted
    bug the suite missed: only values far past the edges were tried."""
    with Runner(db_url) as runner:
        with pytest.raises(ValueError) as refused:
            runner.submit(AGENT, "t", id="past", **placement)
        assert str(refused.value).startswith(says), str(refused.value)
        assert [row.id for row in runner.list()] == []
        if "queue" in placement:
            with pytest.raises(ValueError, match="must be 1 to 64 letters"):
                runner.set_queue_limit(placement["queue"], 1)
            assert runner.queues() == []
