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


def test_an_ancestors_spend_counts_its_own_calls_beside_its_childrens(db_url: str) -> None:
    """The root spends 90 of its 100 tokens itself, then starts two children at once.
    `fast` calls for 4 tokens a call until the tree is over its budget (90 + 12); `slow`
    makes one call of 0, and its tool waits for `fast` to finish. Its next call finds the
    tree's budget spent by the root's own 90 and fast's 12, and is not made (with the
    root's own spend left out, the tree had 12 of 100 spent, and slow called again)."""
    from runner.testing import FunctionModel, turns
    from tests.conditions import wait_until

    slow_calls: list[int] = []

    def small(model: FunctionModel) -> FunctionModel:
        model.max_tokens = 1  # type: ignore[attr-defined]  # estimates near the usage
        return model

    def fast_moves(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if turns(transcript) == 0:
            wait_until(lambda: slow_calls, what="the slow child's first call")
        return {**call("noop", n=turns(transcript)), "usage": 4}

    def slow_moves(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        slow_calls.append(turns(transcript))
        return {**(call("hold") if turns(transcript) == 0 else final("slow")), "usage": 0}

    def fast_finished() -> bool:
        with Runner(url) as watcher:
            kids = {kid.agent_name: kid for kid in watcher.store.child_runs("own")}
        return kids["fast"].status is RunStatus.FINISHED

    def hold() -> str:
        wait_until(fast_finished, what="the fast child to spend the tree's budget")
        return "held"

    def lead(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if turns(transcript) == 0:
            both = [{"name": n, "args": {"task": "go"}} for n in ("fast", "slow")]
            return {"type": "tool", "calls": both, "usage": 90}
        return {**final("done"), "usage": 0}

    url = db_url
    fast = Agent(small(FunctionModel(fast_moves)), {"noop": lambda n: "ok"}, name="fast")
    slow = Agent(small(FunctionModel(slow_moves)), {"hold": hold}, name="slow")
    tools = {"fast": fast.as_tool("fast"), "slow": slow.as_tool("slow")}
    root = Agent(FunctionModel(lead), tools, name="lead", max_tokens=100, max_steps=60)
    with Runner(db_url) as runner:
        runner.run(root, "t", id="own")
        row = runner.row("own")
    assert row.tokens == 90
    assert slow_calls == [0], "the slow child called its model with the tree's budget spent"
    assert row.tokens + row.below_tokens <= 100 + 4


def test_a_parents_max_steps_counts_its_sub_agents_steps_up_to_the_boundary(
    db_url: str,
) -> None:
    """max_steps=4: the root's step 1 hands work to a child, which may take the 3 steps
    left and takes them all; then the tree has taken its 4 and the root stops there, its
    answer step not taken (not a step more for the root, nor for the child)."""
    from runner.testing import FunctionModel, turns

    def worker(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        return {**call("noop", n=turns(transcript)), "usage": 1}

    def lead(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        move = call("kid", task="go") if turns(transcript) == 0 else final("done")
        return {**move, "usage": 1}

    kid = Agent(FunctionModel(worker), {"noop": lambda n: "ok"}, name="kid")
    root = Agent(FunctionModel(lead), {"kid": kid.as_tool("kid")}, name="lead", max_steps=4)
    with Runner(db_url) as runner:
        result = runner.run(root, "t", id="steps")
        row = runner.row("steps")
        (child,) = runner.store.child_runs("steps")
    assert (child.steps, child.stop_reason) == (3, "max_steps")
    assert (result.stop_reason, row.steps, row.below_steps) == ("max_steps", 1, 3)
