"""People in the loop on the in-memory store: the move to `waiting` (no lease), answers
recorded exactly once and only when they fit, cancel, approval_timeout on the store's clock
(recorded by the next claim or refused answer), waiting time kept out of max_seconds, and
an approved call's attempts. The SQL views, the races of answers and the crashes stay in
tests/integration/test_waiting.py."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from runner import Agent, NotWaiting, RunNotFound, WrongAnswer, ask_human, current_call, tool
from runner.core.status import RunStatus
from runner.core.waiting import Answer, Asks
from runner.testing import FunctionModel, ScriptedModel, call, final, tool_results

from .store_support import OWNER, claim, memory_runner


class Shop:
    """A refund agent: step 1 refunds `amount` (approval over 100), then it answers with the
    refund's observation. Its tool keeps a ledger of what really ran: (key, attempt)."""

    def __init__(self, amount: int = 250) -> None:
        self.refunds: list[tuple[str, int]] = []

        @tool(approval=lambda args: args["amount"] > 100)
        def refund(amount: int, idempotency_key: str) -> str:
            running = current_call()
            assert running is not None
            self.refunds.append((idempotency_key, running.attempt))
            return f"refunded {amount}"

        self.model = FunctionModel(
            lambda t: (
                final(tool_results(t)[-1]["content"])
                if tool_results(t)
                else call("refund", amount=amount)
            )
        )
        self.agent = Agent(self.model, {"refund": refund}, name="shop", release="1")


def kinds(runner: Any, run_id: str) -> list[str]:
    return [str(entry.kind) for entry in runner.journal(run_id)]


def test_a_call_that_needs_approval_leaves_the_run_waiting_with_no_lease() -> None:
    shop = Shop()
    runner, store, _ = memory_runner()
    result = runner.run(shop.agent, "refund", id="w1")
    assert (result.status, result.stop_reason, result.output) == ("waiting", None, None)
    wait = result.waiting
    assert wait is not None
    assert (wait.run_id, wait.step, wait.call, wait.tool) == ("w1", 1, "w1-1", "refund")
    assert (wait.asks, wait.args, wait.question) == (
        Asks.APPROVAL,
        {"amount": 250},
        "refund(amount=250)",
    )
    assert wait.expires_at is None
    row = runner.row("w1")
    assert row.status is RunStatus.WAITING
    assert (row.lease_owner, row.lease_expires_at) == (None, None)
    assert row.waiting_since == wait.since
    assert kinds(runner, "w1") == ["task", "action", "wait"]
    assert shop.refunds == [] and shop.model.calls == 1
    assert runner.waiting_for("w1") == wait
    # Nothing claims it: not a worker, not a resume (which leaves the epoch alone).
    assert claim(store) is None
    again = runner.resume("w1", agent=shop.agent)
    assert (again.status, again.waiting) == ("waiting", wait)
    assert runner.row("w1").lease_epoch == row.lease_epoch

    answered = runner.approve("w1", call="w1-1", note="fine by me", by="ann")
    assert (answered.call, answered.answer, answered.by, answered.text) == (
        "w1-1",
        Answer.APPROVED,
        "ann",
        "fine by me",
    )
    assert runner.row("w1").status is RunStatus.QUEUED
    assert runner.waiting_for("w1") is None
    done = runner.resume("w1", agent=shop.agent)
    assert (done.status, done.stop_reason, done.output) == ("finished", "final", "refunded 250")
    assert shop.refunds == [("w1-1", 1)]  # once, with its key, as a first attempt
    assert shop.model.calls == 2  # step 1 was not asked for again
    assert kinds(runner, "w1") == ["task", "action", "wait", "answer", "observation", "final"]


def test_a_call_the_rule_lets_through_never_waits() -> None:
    shop = Shop(amount=40)
    runner, _, _ = memory_runner()
    result = runner.run(shop.agent, "refund", id="small")
    assert (result.status, result.output) == ("finished", "refunded 40")
    assert kinds(runner, "small") == ["task", "action", "observation", "final"]


def test_a_denied_call_never_runs_and_the_model_goes_on() -> None:
    shop = Shop()
    runner, _, _ = memory_runner()
    runner.run(shop.agent, "refund", id="d1")
    assert runner.deny("d1", reason="over the limit", by="bob").answer is Answer.DENIED
    done = runner.resume("d1", agent=shop.agent)
    assert (done.stop_reason, done.output) == ("final", "Denied: over the limit")
    assert done.transcript[2]["is_error"] is True
    assert shop.refunds == []


def test_ask_human_waits_for_a_reply_and_the_model_reads_it() -> None:
    model = ScriptedModel(
        [
            call("ask_human", question="Which colour?"),
            lambda t: final(f"painting it {tool_results(t)[-1]['content']}"),
        ]
    )
    agent = Agent(model, {"ask_human": ask_human})
    runner, _, _ = memory_runner()
    result = runner.run(agent, "paint", id="q1")
    assert result.waiting is not None
    assert (result.waiting.asks, result.waiting.question) == (Asks.REPLY, "Which colour?")
    with pytest.raises(WrongAnswer, match="reply to its question, not an approval"):
        runner.approve("q1")
    with pytest.raises(ValueError, match="the reply's text must not be empty"):
        runner.reply("q1", " ")
    runner.reply("q1", "blue", by="cy")
    assert runner.resume("q1", agent=agent).output == "painting it blue"
    runner.run(agent, "paint", id="q2")
    runner.deny("q2", reason="ask the designer")
    assert runner.resume("q2", agent=agent).output == "painting it Denied: ask the designer"


def test_bad_answers_are_refused_and_write_nothing() -> None:
    shop = Shop()
    runner, _, _ = memory_runner()
    runner.run(shop.agent, "refund", id="b1")
    before = kinds(runner, "b1")
    with pytest.raises(RunNotFound, match="no run with id nope"):
        runner.approve("nope")
    with pytest.raises(WrongAnswer, match=r"waits for approval of refund.*not a reply"):
        runner.reply("b1", "yes")
    with pytest.raises(WrongAnswer, match=r"waits for call b1-1 .*not for b1-7"):
        runner.approve("b1", call="b1-7")
    for blank in ("", "   "):
        with pytest.raises(ValueError, match="a reason must not be empty"):
            runner.deny("b1", reason=blank)
    with pytest.raises(ValueError, match="at most 200 characters"):
        runner.approve("b1", by="x" * 201)
    assert kinds(runner, "b1") == before
    assert runner.row("b1").status is RunStatus.WAITING

    runner.approve("b1", by="ann")
    with pytest.raises(NotWaiting, match="b1-1 was already approved by ann at"):
        runner.deny("b1", reason="no")
    runner.resume("b1", agent=shop.agent)
    with pytest.raises(NotWaiting, match=r"is finished \(final\): it waits for no answer"):
        runner.approve("b1")
    assert kinds(runner, "b1").count("answer") == 1


def test_answers_racing_on_threads_exactly_one_wins() -> None:
    shop = Shop()
    runner, _, _ = memory_runner()
    runner.run(shop.agent, "refund", id="race")
    start = threading.Barrier(6)
    won: list[str] = []

    def answer(n: int) -> None:
        start.wait(10)
        try:
            if n == 5:
                runner.cancel("race")
            else:
                runner.approve("race", by=f"p{n}")
            won.append(f"p{n}")
        except NotWaiting:
            pass

    threads = [threading.Thread(target=answer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    answers = kinds(runner, "race").count("answer")
    row = runner.row("race")
    # A cancel "wins" too (it never fails), but after an approval it only flags the run.
    assert answers <= 1 and len([p for p in won if p != "p5"]) == answers
    assert row.status in (RunStatus.QUEUED, RunStatus.FINISHED)


def test_cancel_finishes_a_waiting_run_at_once() -> None:
    shop = Shop()
    runner, _, _ = memory_runner()
    runner.run(shop.agent, "refund", id="c1")
    epoch = runner.row("c1").lease_epoch
    cancelled = runner.cancel("c1")
    assert (cancelled.status, cancelled.stop_reason) == ("finished", "cancelled")
    row = runner.row("c1")
    assert (row.waiting_since, row.wait_expires_at, row.lease_epoch) == (None, None, epoch + 1)
    with pytest.raises(NotWaiting, match=r"finished \(cancelled\)"):
        runner.approve("c1")
    assert runner.resume("c1", agent=shop.agent).stop_reason == "cancelled"
    assert shop.refunds == []


def test_a_cancel_during_the_step_finishes_the_run_instead_of_leaving_it_waiting() -> None:
    runner, _, _ = memory_runner()

    @tool(approval=True)
    def refund(amount: int) -> str:
        raise AssertionError("never runs")

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        runner.cancel("c2")  # after the loop's check: only the wait's commit can see it
        return call("refund", amount=1)

    result = runner.run(Agent(model, {"refund": refund}), "refund", id="c2")
    assert (result.status, result.stop_reason) == ("finished", "cancelled")
    assert kinds(runner, "c2") == ["task", "action", "wait"]
    assert runner.row("c2").lease_owner is None


# -- approval_timeout and max_seconds: on the store's clock -----------------------------------


def test_an_unanswered_call_is_denied_by_the_first_claim_after_its_timeout() -> None:
    shop = Shop()
    runner, store, clock = memory_runner()
    result = runner.run(shop.agent, "refund", id="t1", approval_timeout=60)
    assert result.waiting is not None and result.waiting.expires_at is not None
    assert result.waiting.expires_at - result.waiting.since == timedelta(seconds=60)
    clock.advance(59)
    assert claim(store) is None
    clock.advance(2)
    claimed = claim(store)  # no process ran the run meanwhile: the claim itself decides
    assert claimed is not None and claimed.run.id == "t1"
    assert (claimed.run.status, claimed.run.lease_owner) == (RunStatus.RUNNING, OWNER)
    (answer,) = [e for e in runner.journal("t1") if e.kind == "answer"]
    assert (answer.answer, answer.answered_by, answer.content) == (
        "timed_out",
        None,
        "no answer within 60s",
    )
    done = runner.execute(claimed, shop.agent)
    assert (done.stop_reason, done.output) == ("final", "Denied: no answer within 60s")
    assert shop.refunds == []


def test_resume_of_a_run_whose_wait_timed_out_records_the_timeout() -> None:
    shop = Shop()
    runner, _, clock = memory_runner()
    runner.run(shop.agent, "refund", id="t2", approval_timeout=5)
    clock.advance(4)
    assert runner.resume("t2", agent=shop.agent).status == "waiting"
    clock.advance(2)
    assert runner.resume("t2", agent=shop.agent).output == "Denied: no answer within 5s"


def test_an_answer_after_the_timeout_is_refused_and_the_timeout_recorded() -> None:
    shop = Shop()
    runner, _, clock = memory_runner()
    runner.run(shop.agent, "refund", id="t3", approval_timeout=5)
    clock.advance(5)
    with pytest.raises(NotWaiting, match=r"waited too long: call t3-1 was denied at .*5s"):
        runner.approve("t3")
    assert runner.row("t3").status is RunStatus.QUEUED
    with pytest.raises(NotWaiting, match="t3-1 was already timed out at"):
        runner.approve("t3")
    assert runner.resume("t3", agent=shop.agent).output == "Denied: no answer within 5s"
    assert shop.refunds == []


def test_time_spent_waiting_does_not_count_against_max_seconds() -> None:
    shop = Shop()
    runner, _, clock = memory_runner()
    runner.run(shop.agent, "refund", id="m1", max_seconds=100)
    deadline = runner.row("m1").deadline
    assert deadline is not None
    clock.advance(3600)  # an hour waiting: far past the deadline of active time
    runner.approve("m1")
    assert runner.row("m1").deadline == deadline + timedelta(seconds=3600)
    done = runner.resume("m1", agent=shop.agent)
    assert (done.stop_reason, done.output) == ("final", "refunded 250")


def test_an_approved_call_taken_over_after_it_started_is_a_second_attempt() -> None:
    """The worker that ran the approved call died: the next claim's attempt is 2."""
    shop = Shop()
    runner, store, clock = memory_runner()
    runner.run(shop.agent, "refund", id="k1")
    runner.approve("k1")
    first = store.claim_run("k1", lease_seconds=30, max_resumes=3, owner="gone:1:1")
    assert store.open_journal(first, lease_seconds=30).attempt(runner.journal("k1")[1]) == 1
    clock.advance(31)  # it died inside the call
    done = runner.resume("k1", agent=shop.agent)
    assert done.output == "refunded 250"
    assert shop.refunds == [("k1-1", 2)]


# -- blocking until an answer, and listing --------------------------------------------------------


def test_run_with_wait_blocks_until_the_answer_comes_and_goes_on() -> None:
    shop = Shop()
    runner, store, _ = memory_runner()
    waiting = threading.Event()
    store_wakeups = store.wakeups(waiting)
    store_wakeups.start()

    def answerer() -> None:  # another person, as soon as the run waits
        while (store.runs.get("wait-1") or {}).get("status") != RunStatus.WAITING:
            waiting.wait(0.01)
        runner.approve("wait-1", by="later")

    thread = threading.Thread(target=answerer)
    thread.start()
    done = runner.run(shop.agent, "refund", id="wait-1", wait=True)
    thread.join(30)
    store_wakeups.close()
    assert (done.status, done.output) == ("finished", "refunded 250")
    assert shop.refunds == [("wait-1-1", 1)]


def test_waiting_runs_are_listed_with_what_they_wait_for() -> None:
    runner, _, _ = memory_runner()
    for n in range(3):
        runner.run(Shop(amount=200 + n).agent, "refund", id=f"l{n}")
    runner.approve("l1")
    assert sorted(r.id for r in runner.list(status=RunStatus.WAITING)) == ["l0", "l2"]
    waits = runner.waits(runner.list())
    assert sorted(waits) == ["l0", "l2"]
    assert waits["l2"].question == "refund(amount=202)"
    assert runner.get("l0").waiting == waits["l0"]
    assert runner.get("l1").waiting is None


# -- a step of several calls that wait -------------------------------------------------------


def desk() -> tuple[Agent, list[str]]:
    """Step 1 asks at once for lookup (needs nothing), refund (approval) and ask (a reply)."""
    ran: list[str] = []

    @tool(approval=True)
    def refund(amount: int) -> str:
        ran.append("refund")
        return f"refunded {amount}"

    def lookup(order: str) -> str:
        ran.append("lookup")
        return f"order {order}"

    def model(transcript: Any) -> dict[str, Any]:
        seen = tool_results(transcript)
        if not seen:
            calls = [
                {"id": "l", "name": "lookup", "args": {"order": "1042"}},
                {"id": "r", "name": "refund", "args": {"amount": 250}},
                {"id": "q", "name": "ask", "args": {"question": "Why?"}},
            ]
            return {"type": "tool", "calls": calls}
        return final(" | ".join(m["content"] for m in seen))

    tools = {"lookup": lookup, "refund": refund, "ask": ask_human}
    return Agent(FunctionModel(model), tools, name="desk"), ran


def test_a_step_of_several_calls_waits_for_each_answer_and_the_last_queues_it() -> None:
    agent, ran = desk()
    runner, store, clock = memory_runner()
    result = runner.run(agent, "help", id="p1", approval_timeout=60)
    assert [w.call for w in result.waits] == ["p1-1.2", "p1-1.3"] and ran == []
    with pytest.raises(WrongAnswer, match="waits for 2 calls"):
        runner.approve("p1")
    replied = runner.reply("p1", "lost", call="p1-1.3")
    assert replied.still_waiting == ("p1-1.2",)
    assert runner.row("p1").status is RunStatus.WAITING
    assert [w.call for w in runner.waiting_calls("p1")] == ["p1-1.2"]
    with pytest.raises(NotWaiting, match=r"call p1-1\.3 was already replied"):
        runner.reply("p1", "again", call="p1-1.3")
    clock.advance(61)  # the call still open times out at the next claim
    claimed = claim(store)
    assert claimed is not None and claimed.run.id == "p1"
    done = runner.execute(claimed, agent)
    assert done.output == "order 1042 | Denied: no answer within 60s | lost"
    assert ran == ["lookup"]
    answers = [(e.idempotency_key, e.answer) for e in runner.journal("p1") if e.kind == "answer"]
    assert answers == [("p1-1.3", Answer.REPLIED), ("p1-1.2", Answer.TIMED_OUT)]


def test_a_timeout_with_no_answer_in_denies_every_call_of_the_step() -> None:
    """Both open calls of the step, not only the first: the in-memory store's own copy of
    the rule (tests/integration/test_parallel_waiting.py holds the SQL store to it)."""
    agent, ran = desk()
    runner, store, clock = memory_runner()
    runner.run(agent, "help", id="p9", approval_timeout=60)
    clock.advance(61)
    claimed = claim(store)
    assert claimed is not None and claimed.run.id == "p9"
    done = runner.execute(claimed, agent)
    denied = "Denied: no answer within 60s"
    assert done.output == f"order 1042 | {denied} | {denied}"
    assert ran == ["lookup"]
    answers = [(e.idempotency_key, e.answer) for e in runner.journal("p9") if e.kind == "answer"]
    assert sorted(answers) == [("p9-1.2", Answer.TIMED_OUT), ("p9-1.3", Answer.TIMED_OUT)]
