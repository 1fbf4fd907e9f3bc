"""A child created claimed with its parent's park (a worker's relay, runner.store.rules.Relay),
on SQLite and PostgreSQL: its task entry and its first model call's hold on the tree's
budgets are written in the park's commit (runner.sql.tree_budget.hold_ahead), so the child
asks its model with no commit of its own first; both or neither are there after any crash.
The hold is made by the rule of any reservation: where the tree has no room the park holds
nothing, and the child's own reservation stops or parks it as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from runner import Runner
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.tree import ChildRun, TreeStopped, child_run_id
from runner.core.waiting import Asks, wait_entry
from runner.errors import RunParked
from runner.sql import leases
from runner.sql.schema import entries, tree_reservations
from runner.store.rules import Claim, Relay

from .counting import commits
from .trees import child

AGENT = f"{Path(__file__).resolve().with_name('agents.py')}:solver_agent"
OWNER = "tester:1:1"


def claimed(runner: Runner, run_id: str, owner: str = OWNER) -> Claim:
    return leases.claim_run(
        runner.engine, run_id, owner=owner, lease_seconds=30, max_resumes=3, clock=runner.clock
    )


def park_for_a_child(
    runner: Runner, first_tokens: int | None, spent: Counters
) -> tuple[Relay, ChildRun, list[int]]:
    """The root, claimed with a relay, parks for one sub-agent's call having spent `spent`:
    the relay, the child, and the commits the park made."""
    relay = Relay(OWNER, 30, 3)
    journal = runner.store.open_journal(claimed(runner, "root"), lease_seconds=30, relay=relay)
    journal.append(Entry(EntryKind.TASK, 0, Counters(), content="t"))
    action = Entry(
        EntryKind.ACTION, 1, spent, content="", tool="sub", args={"task": "go"},
        idempotency_key="root-1",
    )  # fmt: skip
    journal.append(action)
    kid = ChildRun(
        id=child_run_id("root", "root-1"),
        parent_id="root",
        call_key="root-1",
        agent=AGENT,
        agent_name="solver",
        release=None,
        task="go",
        budgets={},
        first_tokens=first_tokens,
    )
    with commits(runner.engine) as made:
        assert journal.wait([wait_entry(action, Asks.CHILD, spent)], [kid])
    return relay, kid, made


def rows_of(runner: Runner, run_id: str) -> tuple[list[Any], list[Any]]:
    """The run's entries and its rows of tree_reservations."""
    with runner.engine.connect() as connection:
        written = connection.execute(
            select(entries.c.seq, entries.c.kind, entries.c.lease_epoch)
            .where(entries.c.run_id == run_id)
            .order_by(entries.c.seq)
        ).all()
        holds = connection.execute(
            select(tree_reservations).where(tree_reservations.c.run_id == run_id)
        ).all()
    return list(written), list(holds)


def test_the_park_writes_the_childs_task_and_first_hold_in_its_one_commit(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="root", max_tokens=1000)
        relay, kid, made = park_for_a_child(runner, 60, Counters(steps=1, tokens=10))
        assert made == [1]  # the wait, the park, the child, its task and its hold
        row = runner.row(kid.id)
        assert row.status is RunStatus.RUNNING and row.lease_owner == OWNER
        written, holds = rows_of(runner, kid.id)
        assert [(seq, kind) for seq, kind, _ in written] == [(0, "task")]
        assert written[0].lease_epoch == row.lease_epoch
        assert [(h.step, h.tokens, h.lease_epoch, h.root_id) for h in holds] == [
            (1, 60, row.lease_epoch, "root")
        ]
        assert relay.next is not None and relay.next.next_seq == 1
        # The child goes on from its task, and its first call takes the hold made for it:
        # no commit before its model is asked.
        journal = runner.store.open_journal(relay.next, lease_seconds=30, relay=relay)
        assert [entry.kind for entry in journal.recorded()] == [EntryKind.TASK]
        with commits(runner.engine) as made:
            held = journal.hold_tree(1, 60)
        assert made == [0] and held is not None and held.id == holds[0].id


def test_a_larger_estimate_than_the_parks_holds_afresh(db_url: str) -> None:
    """A child whose own estimate is larger (a message sent to it meanwhile) reserves as any
    call does, its hold from the park dropped: one row, never two."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="root", max_tokens=1000)
        relay, kid, _ = park_for_a_child(runner, 60, Counters(steps=1, tokens=10))
        assert relay.next is not None
        journal = runner.store.open_journal(relay.next, lease_seconds=30, relay=relay)
        with commits(runner.engine) as made:
            held = journal.hold_tree(1, 61)
        assert made == [1] and held is not None
        _, holds = rows_of(runner, kid.id)
        assert [(h.id, h.tokens) for h in holds] == [(held.id, 61)]


def test_a_park_whose_tree_has_no_room_holds_nothing_ahead(db_url: str) -> None:
    """The root's steps spent: the park writes the child's task, no hold, and the child's
    own reservation stops it, naming the root."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="root", max_steps=1)
        relay, kid, made = park_for_a_child(runner, 60, Counters(steps=1, tokens=10))
        assert made == [1]
        written, holds = rows_of(runner, kid.id)
        assert [kind for _, kind, _ in written] == ["task"] and holds == []
        assert relay.next is not None
        journal = runner.store.open_journal(relay.next, lease_seconds=30, relay=relay)
        try:
            journal.hold_tree(1, 60)
            raise AssertionError("the child was let through with its root's steps spent")
        except TreeStopped as stopped:
            assert stopped.stop.reason is StopReason.MAX_STEPS


def test_a_park_whose_tree_is_crowded_holds_nothing_and_the_child_is_parked(
    db_url: str,
) -> None:
    """Another child holds 1,500 of the root's 1,000 tokens: the park holds nothing for the
    new child, whose own reservation then parks it (they may settle for less)."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="root", max_tokens=1000)
        child(runner, "root", "root-0", "x")
        other = runner.store.open_journal(claimed(runner, "x", "w:2:1"), lease_seconds=30)
        assert other.hold_tree(1, 1500) is not None
        relay, kid, _ = park_for_a_child(runner, 60, Counters(steps=1, tokens=10))
        _, holds = rows_of(runner, kid.id)
        assert holds == []
        assert relay.next is not None
        journal = runner.store.open_journal(relay.next, lease_seconds=30, relay=relay)
        try:
            journal.hold_tree(1, 60)
            raise AssertionError("the child was let through with 1,500 of 1,000 tokens held")
        except RunParked:
            pass
        assert runner.row(kid.id).status is RunStatus.QUEUED


def test_a_child_whose_estimate_its_parent_cannot_tell_writes_its_task_itself(
    db_url: str,
) -> None:
    """No estimate (a context function, a framework's loop): the park writes the child's row
    alone, as before; the child's task rides in its first call's hold."""
    with Runner(db_url) as runner:
        runner.submit(AGENT, "t", id="root", max_tokens=1000)
        relay, kid, _ = park_for_a_child(runner, None, Counters(steps=1, tokens=10))
        assert rows_of(runner, kid.id) == ([], [])
        assert relay.next is not None and relay.next.next_seq == 0
