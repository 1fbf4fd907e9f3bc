"""A tree's budget held before each model call, on SQLite and PostgreSQL: a child's call
reserves a step and its estimate from every ancestor's budget first (runner.sql.tree_budget),
so no call starts once an ancestor's committed spend, or its spend and the calls in flight
below it, reach its budget; a hold ends with the entry that records its call, or with the
lease that made it once another worker takes the run over."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from runner import Agent, Runner
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.tree import TreeStopped
from runner.errors import RunParked
from runner.sql import leases
from runner.sql.schema import runs, tree_reservations
from runner.store.rules import Claim
from runner.testing import FunctionModel, call, final, turns
from tests.conditions import wait_until

from .trees import child

Transcript = list[dict[str, Any]]
AGENT = f"{Path(__file__).resolve().with_name('agents.py')}:solver_agent"


def small(model: FunctionModel) -> FunctionModel:
    # A stated output allowance keeps the estimate near the usage (the default is 1,000).
    model.max_tokens = 20  # type: ignore[attr-defined]
    return model


def test_a_call_that_would_start_after_a_siblings_crossing_is_not_made(db_url: str) -> None:
    """Two children run at once under a root budget of 300 tokens. `slow` makes one call
    (`fast`'s first waits for it), then its tool waits until `fast` has spent the tree's
    budget (4 calls of 100: 400).
    `slow`'s last write saw the tree before the crossing; before reserving, its second call
    was made on that stale view (500 spent). It must find the budget spent, and not call."""
    slow_calls: list[int] = []
    url = db_url

    def fast_moves(transcript: Transcript) -> dict[str, Any]:
        if turns(transcript) == 0:  # both children at work before either spends
            wait_until(lambda: slow_calls, what="the slow child's first call")
        return {**call("noop", n=turns(transcript)), "usage": 100}

    def slow_moves(transcript: Transcript) -> dict[str, Any]:
        slow_calls.append(turns(transcript))
        if turns(transcript) == 0:
            return {**call("hold"), "usage": 0}
        return {**final("slow done"), "usage": 100}

    def fast_finished() -> bool:
        with Runner(url) as watcher:
            kids = {kid.agent_name: kid for kid in watcher.store.child_runs("root-x")}
        return kids["fast"].status is RunStatus.FINISHED

    def hold() -> str:
        wait_until(fast_finished, what="the fast child to spend the tree's budget")
        return "held"

    fast = Agent(small(FunctionModel(fast_moves)), {"noop": lambda n: "ok"}, name="fast")
    slow = Agent(small(FunctionModel(slow_moves)), {"hold": hold}, name="slow")
    both = {
        "type": "tool",
        "calls": [{"name": n, "args": {"task": "go"}} for n in ("fast", "slow")],
    }

    def lead(transcript: Transcript) -> dict[str, Any]:
        return {**(both if turns(transcript) == 0 else final("done")), "usage": 0}

    tools = {"fast": fast.as_tool("fast"), "slow": slow.as_tool("slow")}
    root = Agent(FunctionModel(lead), tools, name="lead", max_tokens=300, max_steps=50)
    with Runner(db_url) as runner:
        runner.run(root, "t", id="root-x")
        kids = {kid.agent_name: kid for kid in runner.store.child_runs("root-x")}
        row = runner.row("root-x")
    assert kids["fast"].tokens == 400 and kids["fast"].stop_reason == "token_budget"
    assert slow_calls == [0], "the slow child called its model after the budget was spent"
    assert kids["slow"].stop_reason == "token_budget"
    assert "root-x" in (kids["slow"].error or "")
    assert row.tokens + row.below_tokens == 400


def claimed(runner: Runner, run_id: str, owner: str = "tester:1:1") -> Claim:
    return leases.claim_run(
        runner.engine, run_id, owner=owner, lease_seconds=30, max_resumes=3, clock=runner.clock
    )


def spend(journal: Any, step: int, tokens: int) -> None:
    """Journal step `step`'s model output, the run's tokens now `tokens` (what the step added
    is charged up the tree in the same transaction)."""
    counters = Counters(steps=step, tokens=tokens)
    journal.append(Entry(EntryKind.ACTION, step, counters, content="x", tool="noop", args={}))


def test_calls_in_flight_hold_the_budget_until_their_entries_are_written(db_url: str) -> None:
    """Root budget 1,000 tokens. a and b hold 600 each (each found room: 0, then 600 <= 1,000);
    c finds 1,200 held and is parked, not stopped: they may settle for less. a's entry
    (300 used) replaces its hold: c finds 300 + 600 and goes. b's (700) brings the spend
    to 1,000: d finds it with c's hold over, parked; c's (1 used) spends the budget: d stops."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="root", max_tokens=1000)
        with runner.engine.begin() as connection:
            connection.execute(
                update(runs).where(runs.c.id == "root").values(status=RunStatus.WAITING)
            )
        journals = {}
        for name in "abcd":
            child(runner, "root", f"root-{name}", name)
            journals[name] = runner.store.open_journal(claimed(runner, name), lease_seconds=30)
        a, b, c, d = (journals[name] for name in "abcd")
        assert a.hold_tree(1, 600) is not None
        assert b.hold_tree(1, 600) is not None
        try:
            c.hold_tree(1, 600)
            raise AssertionError("c was let through with 1,200 of 1,000 tokens held")
        except RunParked as parked:
            assert parked.limit is None
        assert runner.row("c").status is RunStatus.QUEUED
        journals["c"] = c = runner.store.open_journal(claimed(runner, "c"), lease_seconds=30)
        spend(a, 1, 300)
        assert c.hold_tree(1, 600) is not None
        spend(b, 1, 700)
        try:
            d.hold_tree(1, 5)
            raise AssertionError("d was let through with 1,000 spent and 600 held")
        except RunParked:
            pass
        journals["d"] = d = runner.store.open_journal(claimed(runner, "d"), lease_seconds=30)
        spend(c, 1, 1)
        try:
            d.hold_tree(1, 5)
            raise AssertionError("d was let through with 1,001 of 1,000 tokens spent")
        except TreeStopped as stopped:
            assert stopped.stop.reason is StopReason.TOKEN_BUDGET


def test_a_dead_workers_hold_counts_until_its_run_is_taken_over(db_url: str) -> None:
    """A worker that dies holding a call's estimate leaves it counting while the run is held
    under that lease (its call's spend could still be written), and not a moment after
    another worker takes the run over (the old lease can write nothing more)."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="root", max_tokens=1000)
        with runner.engine.begin() as connection:
            connection.execute(
                update(runs).where(runs.c.id == "root").values(status=RunStatus.WAITING)
            )
        child(runner, "root", "root-a", "a")
        child(runner, "root", "root-b", "b")
        dead = runner.store.open_journal(claimed(runner, "a"), lease_seconds=30)
        assert dead.hold_tree(1, 900) is not None
        other = runner.store.open_journal(claimed(runner, "b", "w:2:1"), lease_seconds=30)
        # a's worker is gone; its lease lapses, but nobody has taken a over yet.
        with runner.engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id == "a")
                .values(lease_expires_at=runner.now() - timedelta(seconds=1))
            )
        other.hold_tree(1, 50)  # 900 held still leaves room (900 <= 1,000)
        spend(other, 1, 150)
        try:
            other.hold_tree(2, 50)
            raise AssertionError("b went on with 150 spent and 900 held")
        except RunParked:
            pass
        taken = claimed(runner, "a", "w:3:1")  # the lapsed lease taken over
        assert taken.epoch > dead.epoch
        resumed = runner.store.open_journal(claimed(runner, "b", "w:2:1"), lease_seconds=30)
        assert resumed.hold_tree(2, 50) is not None
        with runner.engine.connect() as connection:
            count = connection.execute(
                select(func.count()).select_from(tree_reservations)
            ).scalar_one()
        assert count >= 1
