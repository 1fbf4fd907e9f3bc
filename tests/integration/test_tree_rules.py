"""Rules of a tree of runs, each asserted where it could break (see /work/notes/p40d.md for
the bug planted against each): a cancel reaches every run below, however deep; a run stops
when a run above it is cancelled, whether or not the cancel reached it; a child is queued in
its parent's queue, one priority above it."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import text

from runner import Agent, Runner, ask_human
from runner.core.status import RunStatus
from runner.sql.database import connect
from runner.testing import ScriptedModel, call, final
from tests.conditions import wait_until


def asking_tree() -> Agent:
    """top -> middle -> leaf, the leaf waiting for a person's answer."""
    leaf = Agent(
        ScriptedModel([call("ask_human", question="ok?"), final("yes")]),
        {"ask_human": ask_human},
        name="leaf",
    )
    middle = Agent(
        ScriptedModel([call("leaf", task="deeper"), final("mid")]),
        {"leaf": leaf.as_tool("leaf")},
        name="middle",
    )
    return Agent(
        ScriptedModel([call("middle", task="go"), final("top")]),
        {"middle": middle.as_tool("middle")},
        name="top",
    )


# A module attribute: a queued run names its agent by reference.
ASKING_TREE = asking_tree()


def test_a_cancel_of_the_root_reaches_its_grandchildren(db_url: str) -> None:
    with Runner(db_url) as runner:
        assert runner.run(asking_tree(), "t", id="root").status == "waiting"
        (middle,) = runner.store.child_runs("root")
        (leaf,) = runner.store.child_runs(middle.id)
        assert runner.store.get_run(leaf.id).status is RunStatus.WAITING
        runner.cancel("root")
        for run_id in ("root", middle.id, leaf.id):
            row = runner.store.get_run(run_id)
            assert (row.status, row.stop_reason) == (RunStatus.FINISHED, "cancelled"), run_id


def test_a_child_is_queued_in_its_parents_queue_one_priority_above_it(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(ASKING_TREE, "t", id="root", queue="q", priority=3, wake=False)
        assert runner.resume("root").status == "waiting"
        (middle,) = runner.store.child_runs("root")
        (leaf,) = runner.store.child_runs(middle.id)
        assert (middle.queue, middle.priority) == ("q", 4)
        assert (leaf.queue, leaf.priority) == ("q", 5)


def test_a_child_stops_when_a_run_above_is_cancelled_though_no_cancel_reached_it(
    db_url: str,
) -> None:
    """The cancel's walk down the tree can miss a child (one created as the cancel came):
    the child still stops at its next step, for the cancel above it."""
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def slow() -> str:
        ran.append(1)
        started.set()
        release.wait(60)
        return "slow done"

    child = Agent(ScriptedModel([*[call("slow")] * 5, final("never")]), {"slow": slow})
    middle = Agent(
        ScriptedModel([call("sub", task="t"), final("mid")]), {"sub": child.as_tool("sub")}
    )
    agent = Agent(
        ScriptedModel([call("middle", task="go"), final("x")]), {"middle": middle.as_tool("m")}
    )
    with Runner(db_url) as runner:
        outcome: list[Any] = []
        driving = threading.Thread(target=lambda: outcome.append(runner.run(agent, "t", id="c")))
        driving.start()
        try:
            wait_until(started.is_set, what="the grandchild's tool started")
            (mid,) = runner.store.child_runs("c")
            (kid,) = runner.store.child_runs(mid.id)
            # The root alone is asked to stop: no cancel reaches the runs below it.
            engine = connect(db_url)
            with engine.begin() as connection:
                connection.execute(
                    text("UPDATE runs SET cancel_requested = :yes WHERE id = 'c'"), {"yes": True}
                )
            engine.dispose()
        finally:
            release.set()
            driving.join(60)
        row = runner.store.get_run(kid.id)
        assert not row.cancel_requested  # nothing asked it: it saw the cancel above
        assert row.stop_reason == "cancelled" and "run c above" in (row.error or ""), row
    # It reads the runs above as of its own last write: it may take one more step, no more.
    assert len(ran) <= 2
    assert outcome[0].stop_reason == "cancelled"
