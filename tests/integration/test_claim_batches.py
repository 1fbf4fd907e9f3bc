"""Claims in batches (`leases.claim_some`), on both databases: each claim of a batch obeys
the rules a single claim obeys (priority then age, delays, queue limits counted with the
runs the batch took before, suspects alone), and batches taken at once never share a run.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from runner import Runner
from runner.store import leases
from runner.store.schema import runs

from .support import expire

AGENTS = Path(__file__).resolve().with_name("agents.py")
AGENT = f"{AGENTS}:solver_agent"
ELSEWHERE = "another-host.example:4242:123"


def batch(runner: Runner, limit: int, owner: str = "tester:1:1", **kwargs: Any) -> list[str]:
    kwargs.setdefault("clock", runner.clock)
    taken = leases.claim_some(
        runner.engine, limit=limit, owner=owner, lease_seconds=30, max_resumes=3, **kwargs
    )
    return [claim.run.id for claim in taken]


def test_a_batch_claims_in_priority_then_age_and_stops_at_its_limit(db_url: str) -> None:
    with Runner(db_url) as runner:
        for run_id, priority in [("p0-old", 0), ("p5", 5), ("p-3", -3), ("p0-new", 0), ("p9", 9)]:
            runner.submit(AGENT, f"task {run_id}", id=run_id, priority=priority)
        assert batch(runner, 3) == ["p9", "p5", "p0-old"]
        assert batch(runner, 10) == ["p0-new", "p-3"]
        assert batch(runner, 10) == []
        with runner.engine.connect() as connection:
            held = {
                tuple(row) for row in connection.execute(select(runs.c.status, runs.c.lease_owner))
            }
        assert held == {("running", "tester:1:1")}


def test_a_batch_never_takes_a_queue_past_its_limit(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.set_queue_limit("tight", 3)
        runner.submit_many(
            AGENT, [{"task": f"t{i}", "id": f"tight-{i}", "queue": "tight"} for i in range(10)]
        )
        runner.submit(AGENT, "open", id="open-0", queue="open")
        taken = batch(runner, 10)
        # The three oldest of the limited queue, then the other queue is not held back.
        assert taken == ["tight-0", "tight-1", "tight-2", "open-0"]
        assert batch(runner, 10) == []
        # A place frees, one more is taken, and no more.
        with runner.engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id == "tight-1")
                .values(status="finished", lease_owner=None, lease_expires_at=None)
            )
        assert batch(runner, 10) == ["tight-3"]
        (tight,) = [q for q in runner.queues() if q.name == "tight"]
        assert (tight.running, tight.queued) == (3, 6)


def test_a_resumption_in_a_full_queue_takes_its_own_place(db_url: str) -> None:
    """A run whose lease expired holds no place; resumed, it takes one, and the batch
    counts it against the queue like a fresh claim."""
    with Runner(db_url) as runner:
        runner.set_queue_limit("two", 2)
        for i in range(4):
            runner.submit(AGENT, f"t{i}", id=f"two-{i}", queue="two")
        assert batch(runner, 2, owner=ELSEWHERE) == ["two-0", "two-1"]
        expire(runner, "two-0")
        assert batch(runner, 10) == ["two-0"]  # the resumption, and not two-2 beside it


def test_a_delayed_run_is_not_in_a_batch(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(AGENT, "now", id="now-1")
        runner.submit(AGENT, "later", id="later", delay=3600, priority=100)
        runner.submit(AGENT, "now", id="now-2")
        assert batch(runner, 10) == ["now-1", "now-2"]
        assert runner.row("later").status == "queued"


def test_a_suspect_stops_a_batch_and_runs_alone(db_url: str) -> None:
    """A suspect (its last worker died before it wrote anything) is taken only by an idle
    worker and only alone: a batch stops before it, and one that takes it ends with it."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "suspect", id="suspect", priority=5)
        assert batch(runner, 1, owner=ELSEWHERE) == ["suspect"]
        expire(runner, "suspect")  # its worker died before the run wrote an entry
        runner.submit(AGENT, "first", id="first", priority=9)
        runner.submit(AGENT, "after", id="after", priority=0)
        runner.submit(AGENT, "last", id="last", priority=0)
        assert batch(runner, 10) == ["first"]  # stopped at the suspect, next in order
        assert batch(runner, 10, suspects=False) == []  # a busy worker leaves it
        taken = leases.claim_some(
            runner.engine,
            limit=10,
            owner="tester:1:1",
            lease_seconds=30,
            max_resumes=3,
            clock=runner.clock,
        )
        assert [(c.run.id, c.stalled, c.crash_loop) for c in taken] == [("suspect", 1, False)]
        assert batch(runner, 10) == ["after", "last"]


def test_batches_taken_at_once_never_share_a_run_nor_pass_a_limit(db_url: str) -> None:
    """Four threads claim batches at once, each batch its own transaction: SKIP LOCKED on
    PostgreSQL, BEGIN IMMEDIATE on SQLite keep every run to one claimer; the queue's lock
    keeps the limited queue to its limit."""
    with Runner(db_url) as runner:
        runner.set_queue_limit("tight", 4)
        runner.submit_many(AGENT, [{"task": f"o{i}", "queue": "open"} for i in range(60)])
        runner.submit_many(AGENT, [{"task": f"t{i}", "queue": "tight"} for i in range(20)])
    start = threading.Barrier(4)
    taken: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        try:
            with Runner(db_url) as mine:
                start.wait(60)
                while got := batch(mine, 7, owner=f"claimer:{n}:1"):
                    with lock:
                        taken.extend(got)
        except BaseException as exc:  # told to the test below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert len(taken) == len(set(taken)) == 64
    with Runner(db_url) as runner:
        by_queue = Counter(runner.row(run_id).queue for run_id in taken)
    assert by_queue == {"open": 60, "tight": 4}
