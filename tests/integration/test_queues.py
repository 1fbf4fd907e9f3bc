"""Queues on both databases: what only SQL can show. Claimers at once never pass a limit
(the queue's row lock), bulk submits go in batches of one transaction each, and the columns
hold the edges of names and priorities exactly.

The rules of claims (priority then age, the queues served, delays, limits, waiting runs)
are tested on the in-memory store (tests/unit/test_memory_claims.py, test_memory_queues.py),
and tests/integration/test_store_contract.py checks that the databases obey them alike.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from runner import Runner
from runner.sql import leases
from runner.store.rules import Claim

AGENTS = Path(__file__).resolve().with_name("agents.py")
AGENT = f"{AGENTS}:solver_agent"


def claim(runner: Runner, owner: str = "tester:1:1", **kwargs: Any) -> Claim | None:
    kwargs.setdefault("clock", runner.clock)
    taken = leases.claim_some(
        runner.engine, limit=1, owner=owner, lease_seconds=30, max_resumes=3, **kwargs
    )
    return taken[0] if taken else None


# -- limits ----------------------------------------------------------------------------------


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


def test_a_batch_failing_midway_leaves_earlier_batches_and_nothing_of_itself(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process takes an id of the second batch after the check: that batch fails
    whole, the first stays, and the error says exactly what was submitted."""
    from runner.errors import SubmitInterrupted
    from runner.sql import runs as store

    real = store.existing_runs

    def checked_then_taken(engine: Any, run_ids: Any) -> Any:
        found = real(engine, run_ids)
        with Runner(db_url) as other:
            other.submit(AGENT, "someone else's", id="taken")
        return found

    monkeypatch.setattr(store, "existing_runs", checked_then_taken)
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
