"""Sub-agents as child runs, on SQLite and PostgreSQL: a child is a durable run of its own,
created with its parent's wait (id derived from the call's key), its end delivered as the
wait's answer exactly once; the parent parks meanwhile; spend is charged up the tree in the
child's own transactions; a cancel travels down; a child's failure is an observation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select

from runner import Agent, ModelFatal, Runner, ask_human
from runner.core.status import RunStatus
from runner.core.tree import child_run_id
from runner.core.waiting import Answer, Asks
from runner.sql.schema import entries, runs
from runner.testing import FunctionModel, ScriptedModel, call, final, tool_results, turns

Transcript = list[dict[str, Any]]


def spending(tokens: int, *moves: Any) -> FunctionModel:
    """A model whose every move reports `tokens` of usage: the moves in order, then an
    answer naming what it was asked."""

    def move(transcript: Transcript) -> dict[str, Any]:
        n = turns(transcript)
        chosen = dict(moves[n]) if n < len(moves) else final(f"did: {transcript[0]['content']}")
        chosen["usage"] = tokens
        return chosen

    return FunctionModel(move)


def both(*tasks: tuple[str, str]) -> dict[str, Any]:
    """One step calling several sub-agents at once."""
    return {"type": "tool", "calls": [{"name": n, "args": {"task": t}} for n, t in tasks]}


def team(tokens: int = 10, **budgets: Any) -> Agent:
    """A parent that hands two tasks to two sub-agents at once, then answers."""
    researcher = Agent(spending(tokens), name="researcher")
    writer = Agent(spending(tokens, call("noop")), {"noop": lambda: "ok"}, name="writer")
    tools = {"research": researcher.as_tool("research"), "write": writer.as_tool("write")}
    parent = spending(tokens, both(("research", "find"), ("write", "draft")))
    return Agent(parent, tools, name="lead", **budgets)


def tree_rows(url: str, root_id: str) -> list[Any]:
    from runner.sql.database import connect

    engine = connect(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(select(runs).where(runs.c.root_id == root_id)).all())
    finally:
        engine.dispose()


def test_children_are_durable_runs_of_their_own_and_their_answers_the_observations(
    db_url: str,
) -> None:
    with Runner(db_url) as runner:
        result = runner.run(team(), "write a report", id="lead-1")
        assert result.stop_reason == "final"
        observed = sorted(m["content"] for m in tool_results(result.transcript))
        assert observed == ["did: draft", "did: find"]
        kids = {row.id: row for row in runner.store.child_runs("lead-1")}
    assert {kid.parent_call_key for kid in kids.values()} == {"lead-1-1.1", "lead-1-1.2"}
    for kid in kids.values():
        assert kid.id == child_run_id("lead-1", kid.parent_call_key or "")
        assert (kid.parent_id, kid.root_id, kid.status) == ("lead-1", "lead-1", RunStatus.FINISHED)
        assert kid.stop_reason == "final"
    by_key = {kid.parent_call_key: kid for kid in kids.values()}
    assert by_key["lead-1-1.1"].task == "find" and by_key["lead-1-1.2"].task == "draft"


def test_the_roots_spend_is_the_sum_of_the_trees(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(team(tokens=7), "write", id="lead-2")
    rows = tree_rows(db_url, "lead-2")
    root = next(row for row in rows if row.id == "lead-2")
    assert len(rows) == 3
    # The root's own (1 model call before, 1 after) plus what was charged below it.
    assert root.below_tokens == sum(row.tokens for row in rows if row.id != "lead-2") == 21
    assert root.tokens + root.below_tokens == sum(row.tokens for row in rows) == 35
    assert root.below_steps == sum(row.steps for row in rows if row.id != "lead-2")


def test_when_the_roots_budget_is_spent_every_run_stops_naming_it(db_url: str) -> None:
    looping = Agent(spending(40, *[call("noop")] * 20), {"noop": lambda: "ok"}, name="looper")
    parent = spending(40, call("loop", task="go"), final("after"))
    agent = Agent(parent, {"loop": looping.as_tool("loop")}, max_tokens=150, max_steps=50)
    with Runner(db_url) as runner:
        result = runner.run(agent, "t", id="lead-3")
        (kid,) = runner.store.child_runs("lead-3")
    assert kid.stop_reason == "token_budget"
    # 40 (root) + 40 + 40 + 40 = 160 > 150 after the child's third call: it stops there.
    assert kid.tokens == 120 or "lead-3" in (kid.error or "")
    observed = tool_results(result.transcript)[0]
    assert observed["is_error"] and "stopped: token_budget" in observed["content"]
    assert result.stop_reason == "token_budget"


def test_a_child_that_fails_is_an_observation_the_parent_acts_on(db_url: str) -> None:
    def broken(transcript: Transcript) -> Any:
        raise ModelFatal("the key was revoked")

    child = Agent(FunctionModel(broken), name="broken")
    parent = ScriptedModel([call("ask", task="x"), final("managed without it")])
    with Runner(db_url) as runner:
        result = runner.run(Agent(parent, {"ask": child.as_tool("ask")}), "t", id="lead-4")
    assert result.stop_reason == "final"
    observed = tool_results(result.transcript)[0]
    assert observed["is_error"] and "stopped: model_error" in observed["content"]
    assert "the key was revoked" in observed["content"]


def test_a_parked_parent_holds_no_lease_and_a_cancel_travels_down(db_url: str) -> None:
    asking = Agent(
        ScriptedModel([call("ask_human", question="ok?"), final("yes")]),
        {"ask_human": ask_human},
        name="asker",
    )
    parent = ScriptedModel([call("sub", task="check"), final("done")])
    agent = Agent(parent, {"sub": asking.as_tool("sub")})
    with Runner(db_url) as runner:
        waiting = runner.run(agent, "t", id="lead-5")
        assert waiting.status == "waiting"
        root = runner.store.get_run("lead-5")
        assert (root.status, root.lease_owner) == (RunStatus.WAITING, None)
        (kid,) = runner.store.child_runs("lead-5")
        assert kid.status is RunStatus.WAITING  # for a person's reply
        (wait,) = runner.store.waits([root])["lead-5"]
        assert wait.asks is Asks.CHILD
        runner.cancel("lead-5")
        assert runner.store.get_run(kid.id).stop_reason == "cancelled"
        assert runner.store.get_run("lead-5").stop_reason == "cancelled"


def test_a_childs_end_is_delivered_once_however_often_it_is_tried(db_url: str) -> None:
    asking = Agent(
        ScriptedModel([call("ask_human", question="ok?"), final("yes")]),
        {"ask_human": ask_human},
        name="asker",
    )
    agent = Agent(
        ScriptedModel([call("sub", task="check"), final("done")]), {"sub": asking.as_tool("sub")}
    )
    with Runner(db_url) as runner:
        runner.run(agent, "t", id="lead-6")
        (kid,) = runner.store.child_runs("lead-6")
        runner.reply(kid.id, "fine")
        # The child runs on here (resume), its end delivered; then delivered again, swept.
        runner.resume(kid.id, agent=asking)
        assert runner.store.deliver_children("lead-6") is False
        assert runner.store.deliver_ended() == 0
        answers = [e for e, _ in runner.store.load_entries("lead-6") if e.kind == "answer"]
        assert [(a.answer, a.content) for a in answers] == [(Answer.ENDED, "yes")]
        assert runner.store.get_run("lead-6").status is RunStatus.QUEUED
        result = runner.resume("lead-6", agent=agent)
    assert (result.stop_reason, result.output) == ("final", "done")


def test_a_person_cannot_answer_for_a_child(db_url: str) -> None:
    from runner import WrongAnswer

    asking = Agent(
        ScriptedModel([call("ask_human", question="ok?"), final("yes")]), {"ask_human": ask_human}
    )
    agent = Agent(
        ScriptedModel([call("sub", task="c"), final("d")]), {"sub": asking.as_tool("sub")}
    )
    with Runner(db_url) as runner:
        runner.run(agent, "t", id="lead-7")
        with pytest.raises(WrongAnswer, match="sub-agent"):
            runner.approve("lead-7")


def test_grandchildren_nest_to_max_depth(db_url: str) -> None:
    leaf = Agent(spending(1), name="leaf")
    middle = Agent(spending(1, call("leaf", task="deeper")), {"leaf": leaf.as_tool("leaf")})
    top = Agent(
        spending(1, call("middle", task="go")), {"middle": middle.as_tool("middle")}, max_depth=1
    )
    with Runner(db_url) as runner:
        result = runner.run(top, "t", id="lead-8")
        (mid,) = runner.store.child_runs("lead-8")
        (deep,) = runner.store.child_runs(mid.id)
    assert deep.stop_reason == "max_depth" and deep.root_id == "lead-8"
    assert result.stop_reason == "final"


def test_the_journal_keeps_each_child_call_as_a_wait_and_its_answer(db_url: str) -> None:
    from runner.sql.database import connect

    with Runner(db_url) as runner:
        runner.run(team(), "t", id="lead-9")
    engine = connect(db_url)
    with engine.connect() as connection:
        kinds = [
            (row.kind, row.waits_for, row.answer)
            for row in connection.execute(
                select(entries).where(entries.c.run_id == "lead-9").order_by(entries.c.seq)
            )
        ]
    engine.dispose()
    assert kinds.count(("wait", "child", None)) == 2
    assert kinds.count(("answer", None, "ended")) == 2


def test_a_parent_killed_before_its_next_write_derives_its_childs_observation_again(
    db_url: str,
) -> None:
    """The observation of a child's end rides in the parent's next write: killed before it
    (in its next model call), the parent keeps the child's answer, and its resume derives
    the observation again, once, without starting the child again."""
    from .support import Crash, crashes_on_call

    asked: list[int] = []
    researcher = Agent(spending(5), name="researcher")

    def lead(crash: bool) -> Agent:
        model = spending(5, call("research", task="find"))
        counted = FunctionModel(lambda transcript: (asked.append(1), model(transcript))[1])
        chosen = FunctionModel(crashes_on_call(2, counted)) if crash else counted
        return Agent(chosen, {"research": researcher.as_tool("research")}, name="lead")

    with Runner(db_url) as runner:
        with pytest.raises(Crash):
            runner.run(lead(crash=True), "report", id="lead-k")
        rows = [(r.step, r.kind) for r in _entries(db_url, "lead-k")]
        assert rows[-2:] == [(1, "wait"), (1, "answer")]  # the observation not written
    with Runner(db_url) as runner:
        result = runner.resume("lead-k", agent=lead(crash=False), steal=True)
        assert (result.stop_reason, result.output) == ("final", "did: report")
        assert tool_results(result.transcript) == [
            {"role": "tool", "name": "research", "content": "did: find", "is_error": False}
        ]
        kids = runner.store.child_runs("lead-k")
    assert [(kid.status, kid.resumes) for kid in kids] == [(RunStatus.FINISHED, 0)]
    rows = [(r.step, r.kind) for r in _entries(db_url, "lead-k")]
    assert rows == [
        (0, "task"), (1, "action"), (1, "wait"), (1, "answer"), (1, "observation"), (2, "final"),
    ]  # fmt: skip
    assert len(asked) == 2  # step 1, then step 2 after the resume (the kill came first)


def _entries(url: str, run_id: str) -> list[Any]:
    from runner.sql.database import connect

    engine = connect(url)
    try:
        with engine.connect() as connection:
            return list(
                connection.execute(
                    select(entries).where(entries.c.run_id == run_id).order_by(entries.c.seq)
                ).all()
            )
    finally:
        engine.dispose()


# Module attributes: a worker loads them by reference (`tests.integration.test_sub_agents:...`).
WORKER_LEAF = Agent(spending(5), name="leaf")
WORKER_LEAD = Agent(
    spending(5, both(("leaf", "a"), ("leaf", "b"), ("leaf", "c"))),
    {"leaf": WORKER_LEAF.as_tool("leaf")},
    name="lead",
    max_steps=30,
)


def test_a_worker_runs_the_children_and_the_parent_again_with_slots_to_spare(db_url: str) -> None:
    from runner.service.worker import Worker

    with Runner(db_url) as runner:
        runner.submit(WORKER_LEAD, "fan out", id="lead-w")
    # One slot: the parent parks (letting it go) before any child can run in it.
    Worker(db_url, concurrency=1, once=True, poll=0.05).serve()
    with Runner(db_url) as runner:
        result = runner.get("lead-w")
        kids = runner.store.child_runs("lead-w")
    assert (result.stop_reason, len(kids)) == ("final", 3)
    assert sorted(m["content"] for m in tool_results(result.transcript)) == [
        "did: a", "did: b", "did: c",
    ]  # fmt: skip
    # Each child names its agent for any worker: the module attribute holding it.
    assert {(kid.agent or "").rpartition(":")[2] for kid in kids} == {"WORKER_LEAF"}


def test_a_child_given_up_for_crash_loop_is_swept_to_its_parent(db_url: str) -> None:
    from sqlalchemy import update

    from runner.sql.database import connect

    asking = Agent(
        ScriptedModel([call("ask_human", question="ok?"), final("yes")]), {"ask_human": ask_human}
    )
    agent = Agent(
        ScriptedModel([call("sub", task="c"), final("carried on")]), {"sub": asking.as_tool("sub")}
    )
    with Runner(db_url) as runner:
        runner.run(agent, "t", id="lead-c")
        (kid,) = runner.store.child_runs("lead-c")
        # As a claim gives a run up (its workers kept dying), with nobody there to deliver.
        engine = connect(db_url)
        with engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id == kid.id)
                .values(
                    status="finished",
                    stop_reason="crash_loop",
                    error="taken over 4 times",
                    finished_at=datetime.now(UTC),
                )
            )
        engine.dispose()
        assert runner.store.get_run("lead-c").status is RunStatus.WAITING
        assert runner.store.deliver_ended() == 1  # what every worker's poll does
        result = runner.resume("lead-c", agent=agent)
    assert result.output == "carried on"
    observed = tool_results(result.transcript)[0]
    assert observed["is_error"] and "stopped: crash_loop" in observed["content"]


def test_a_cancel_of_the_root_stops_a_child_that_a_worker_is_running(db_url: str) -> None:
    import threading

    from tests.conditions import wait_until

    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(30)
        return "slow done"

    child = Agent(ScriptedModel([call("slow"), call("slow"), final("never")]), {"slow": slow})
    agent = Agent(ScriptedModel([call("sub", task="t"), final("x")]), {"sub": child.as_tool("sub")})
    with Runner(db_url) as runner:
        outcome: list[Any] = []
        driving = threading.Thread(target=lambda: outcome.append(runner.run(agent, "t", id="c-1")))
        driving.start()
        wait_until(started.is_set, what="the child's tool started")
        (kid,) = runner.store.child_runs("c-1")
        assert runner.store.get_run(kid.id).status is RunStatus.RUNNING
        runner.cancel("c-1")  # the root is parked: it finishes at once; the child is asked
        assert runner.store.get_run("c-1").stop_reason == "cancelled"
        assert runner.store.get_run(kid.id).cancel_requested
        release.set()
        driving.join(60)
        assert runner.store.get_run(kid.id).stop_reason == "cancelled"  # before its next call
    assert outcome[0].stop_reason == "cancelled"
