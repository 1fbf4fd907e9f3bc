"""Durable runs that wait for a person, on SQLite and PostgreSQL, through the Python API:
the move to `waiting` (no lease, no worker, no connection), answers racing each other and a
cancel (exactly one wins), approval_timeout on the database's clock, crashes around the
answer, waking a blocked process, and the views that show it all to SQL.

The rules of answers (what fits, what is refused with nothing written, timeouts, waiting
time kept out of max_seconds) are tested on the in-memory store
(tests/unit/test_memory_approvals.py) and, on both databases alike, by
tests/integration/test_store_contract.py."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text

from runner import (
    Agent,
    NotWaiting,
    Runner,
    RunNotFound,
    WrongAnswer,
    ask_human,
    current_call,
    tool,
)
from runner.core.clock import ManualClock
from runner.core.status import RunStatus
from runner.core.waiting import Answer, Asks
from runner.sql import leases
from runner.sql.schema import entries, runs
from runner.store.rules import Claim
from runner.testing import FunctionModel

from .counting import commits
from .support import Crash, Transcript, crash, entry_rows

OWNER = "test-worker"


class Shop:
    """A refund agent: step 1 refunds `amount` (approval over 100), then it answers with the
    refund's observation. Its tools keep a ledger of what really ran."""

    def __init__(self, amount: int = 250, *, crash_in_refund: bool = False) -> None:
        self.refunds: list[tuple[str, int]] = []  # (key, attempt) of each refund that ran
        self.crash_in_refund = crash_in_refund

        @tool(approval=lambda args: args["amount"] > 100)
        def refund(amount: int, idempotency_key: str) -> str:
            call = current_call()
            assert call is not None
            self.refunds.append((idempotency_key, call.attempt))
            if self.crash_in_refund:
                self.crash_in_refund = False
                raise Crash  # the worker dies inside the approved call
            return f"refunded {amount}"

        def model(transcript: Transcript) -> dict[str, Any]:
            seen = [m for m in transcript if m["role"] == "tool"]
            if not seen:
                return {"type": "tool", "name": "refund", "args": {"amount": amount}}
            return {"type": "final", "content": seen[-1]["content"]}

        self.model = FunctionModel(model)
        self.agent = Agent(self.model, {"refund": refund}, name="shop", release="1")


def rows(runner: Runner, sql: str, **params: Any) -> list[dict[str, Any]]:
    with runner.engine.connect() as connection:
        return [dict(r._mapping) for r in connection.execute(text(sql), params)]


def kinds(runner: Runner, run_id: str) -> list[str]:
    return [r["kind"] for r in entry_rows(runner.engine, run_id)]


def answers(runner: Runner, run_id: str) -> int:
    with runner.engine.connect() as connection:
        return int(
            connection.execute(
                select(func.count())
                .select_from(entries)
                .where(entries.c.run_id == run_id, entries.c.kind == "answer")
            ).scalar_one()
        )


# -- waiting and answering ------------------------------------------------------------------


def test_a_call_that_needs_approval_leaves_the_run_waiting_with_no_lease(db_url: str) -> None:
    shop = Shop()
    with Runner(db_url) as runner:
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
        # It holds no connection either: none is out but the one the process keeps for its
        # journal writes (store.writer.Writer), which serves every run alike.
        assert runner.writer.keeps
        assert runner.engine.pool.checkedout() == 1  # type: ignore[attr-defined]
        assert kinds(runner, "w1") == ["task", "action", "wait"]
        assert shop.refunds == [] and shop.model.calls == 1
        assert runner.waiting_for("w1") == wait
        # Nothing claims it: not a worker, not a resume (which leaves the epoch alone).
        assert (
            leases.claim_some(runner.engine, limit=1, owner=OWNER, lease_seconds=30, max_resumes=3)
            == []
        )
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
    with Runner(db_url) as runner:
        assert kinds(runner, "w1") == ["task", "action", "wait", "answer", "observation", "final"]
        (approval,) = rows(runner, "SELECT * FROM approvals")
        (call,) = rows(runner, "SELECT * FROM tool_calls")
    assert approval["idempotency_key"] == "w1-1"
    assert (approval["answer"], approval["answered_by"], approval["note"]) == (
        "approved",
        "ann",
        "fine by me",
    )
    assert (approval["waits_for"], approval["run_status"], approval["question"]) == (
        "approval",
        "finished",
        "refund(amount=250)",
    )
    assert approval["waited_seconds"] >= 0
    assert (call["status"], call["attempt"], call["result"]) == ("done", 1, "refunded 250")


def test_a_call_that_needs_approval_is_written_in_the_commit_that_parks_the_run(
    db_url: str,
) -> None:
    """No call of the step runs before the park, so the call goes in the park's one commit
    with its wait: a crash before it leaves nothing of the step to settle."""
    shop = Shop()
    with Runner(db_url) as runner:
        with commits(runner.engine) as made:
            result = runner.run(shop.agent, "refund", id="w1")
        assert result.status == "waiting"
        # The run created claimed with its task; its call, the call's wait and the park.
        assert made == [2]
        written = rows(
            runner, "SELECT kind, created_at FROM entries WHERE run_id = :id ORDER BY seq", id="w1"
        )
        stamps = {r["kind"]: r["created_at"] for r in written}
        assert list(stamps) == ["task", "action", "wait"]
        assert stamps["action"] == stamps["wait"]  # one write stamps its entries alike


def test_a_denied_call_never_runs_and_the_model_goes_on(db_url: str) -> None:
    shop = Shop()
    with Runner(db_url) as runner:
        runner.run(shop.agent, "refund", id="d1")
        answered = runner.deny("d1", reason="over the limit", by="bob")
        assert answered.answer is Answer.DENIED
        done = runner.resume("d1", agent=shop.agent)
        assert (done.stop_reason, done.output) == ("final", "Denied: over the limit")
        assert done.transcript[2]["is_error"] is True
        assert shop.refunds == []
        (approval,) = rows(runner, "SELECT answer, answered_by, note FROM approvals")
        (call,) = rows(runner, "SELECT status, result FROM tool_calls")
    assert approval == {"answer": "denied", "answered_by": "bob", "note": "over the limit"}
    assert call == {"status": "denied", "result": "Denied: over the limit"}


def test_ask_human_waits_for_a_reply_and_the_model_reads_it(db_url: str) -> None:
    def model(transcript: Transcript) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        if not seen:
            return {"type": "tool", "name": "ask_human", "args": {"question": "Which colour?"}}
        return {"type": "final", "content": f"painting it {seen[-1]['content']}"}

    agent = Agent(model, {"ask_human": ask_human})
    with Runner(db_url) as runner:
        result = runner.run(agent, "paint", id="q1")
        assert result.waiting is not None
        assert (result.waiting.asks, result.waiting.question) == (Asks.REPLY, "Which colour?")
        with pytest.raises(WrongAnswer, match="reply to its question, not an approval"):
            runner.approve("q1")
        with pytest.raises(ValueError, match="the reply's text must not be empty"):
            runner.reply("q1", " ")
        runner.reply("q1", "blue", by="cy")
        done = runner.resume("q1", agent=agent)
        # A person may also decline a question: the model reads it as a denial.
        runner.run(agent, "paint", id="q2")
        runner.deny("q2", reason="ask the designer")
        declined = runner.resume("q2", agent=agent)
        (approval, _) = rows(
            runner, "SELECT waits_for, answer, note FROM approvals ORDER BY run_id"
        )
    assert done.output == "painting it blue"
    assert approval == {"waits_for": "reply", "answer": "replied", "note": "blue"}
    assert declined.output == "painting it Denied: ask the designer"


def test_cancel_finishes_a_waiting_run_at_once(db_url: str) -> None:
    shop = Shop()
    with Runner(db_url) as runner:
        runner.run(shop.agent, "refund", id="c1")
        epoch = runner.row("c1").lease_epoch
        cancelled = runner.cancel("c1")
        assert (cancelled.status, cancelled.stop_reason) == ("finished", "cancelled")
        row = runner.row("c1")
        assert (row.waiting_since, row.wait_expires_at, row.lease_epoch) == (None, None, epoch + 1)
        with pytest.raises(NotWaiting, match=r"finished \(cancelled\)"):
            runner.approve("c1")
        assert runner.resume("c1", agent=shop.agent).stop_reason == "cancelled"
        (approval,) = rows(runner, "SELECT answer, run_status FROM approvals")
        (call,) = rows(runner, "SELECT status FROM tool_calls")
    assert approval == {"answer": None, "run_status": "finished"}
    assert call == {"status": "unanswered"}
    assert shop.refunds == []


def test_answers_racing_each_other_and_a_cancel_exactly_one_wins(db_url: str) -> None:
    shop = Shop()
    with Runner(db_url) as runner:
        for round_ in range(4):
            run_id = f"race-{round_}"
            runner.run(shop.agent, "refund", id=run_id)
            start = threading.Barrier(4)
            outcomes: dict[str, str] = {}

            def attempt(
                name: str,
                answer: Any,
                run_id: str = run_id,
                start: threading.Barrier = start,
                outcomes: dict[str, str] = outcomes,
            ) -> None:
                start.wait(60)
                try:
                    answer(run_id)
                    outcomes[name] = "won"
                except NotWaiting as exc:
                    outcomes[name] = f"lost: {exc}"

            contenders = {
                "approve-1": lambda r: runner.approve(r, by="a1"),
                "approve-2": lambda r: runner.approve(r, by="a2"),
                "deny": lambda r: runner.deny(r, reason="no", by="d"),
                # Cancel always succeeds; it "wins" when the answers then find it finished.
                "cancel": lambda r: runner.cancel(r),
            }
            threads = [threading.Thread(target=attempt, args=item) for item in contenders.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            won = [name for name in ("approve-1", "approve-2", "deny") if outcomes[name] == "won"]
            recorded = answers(runner, run_id)
            assert len(won) == recorded <= 1, outcomes
            assert runner.row(run_id).stop_reason == "cancelled"  # the cancel always holds
            if not won:  # the cancel came first: every answer found the run finished
                assert all(
                    "finished (cancelled)" in outcomes[n] for n in contenders if n != "cancel"
                )
    assert shop.refunds == []  # cancelled every time before the call could run


# -- approval_timeout and max_seconds: on the database's clock --------------------------------


def test_an_unanswered_call_is_denied_by_the_first_claim_after_its_timeout(db_url: str) -> None:
    clock = ManualClock()
    shop = Shop()
    with Runner(db_url, clock=clock) as runner:
        result = runner.run(shop.agent, "refund", id="t1", approval_timeout=60)
        assert result.waiting is not None and result.waiting.expires_at is not None
        assert result.waiting.expires_at - result.waiting.since == timedelta(seconds=60)

        def claim() -> Claim | None:
            taken = leases.claim_some(
                runner.engine, limit=1, owner=OWNER, lease_seconds=30, max_resumes=3, clock=clock
            )
            return taken[0] if taken else None

        clock.advance(59)
        assert claim() is None
        assert answers(runner, "t1") == 0
        clock.advance(2)
        claimed = claim()  # no process ran the run meanwhile: the claim itself decides
        assert claimed is not None and claimed.run.id == "t1"
        assert claimed.run.status is RunStatus.RUNNING
        (answer,) = rows(runner, "SELECT answer, answered_by, note FROM approvals")
        assert answer == {
            "answer": "timed_out",
            "answered_by": None,
            "note": "no answer within 60s",
        }
        done = runner.execute(claimed, shop.agent)
    assert (done.stop_reason, done.output) == ("final", "Denied: no answer within 60s")
    assert shop.refunds == []


def test_an_answer_before_the_timeout_is_taken_and_the_call_runs(db_url: str) -> None:
    """Issue 29: with the expiry comparison inverted, an answer in time was refused as too
    late; only answers after the timeout were tested."""
    clock = ManualClock()
    shop = Shop()
    with Runner(db_url, clock=clock) as runner:
        runner.run(shop.agent, "refund", id="t4", approval_timeout=5)
        clock.advance(4.999)  # the last moment before it expires (at 5s: refused, above)
        answered = runner.approve("t4", by="ann")
        assert (answered.call, answered.answer) == ("t4-1", Answer.APPROVED)
        assert runner.row("t4").status is RunStatus.QUEUED
        done = runner.resume("t4", agent=shop.agent)
        (answer,) = rows(runner, "SELECT answer, answered_by FROM approvals")
    assert answer == {"answer": "approved", "answered_by": "ann"}
    assert (done.stop_reason, done.output) == ("final", "refunded 250")
    assert shop.refunds == [("t4-1", 1)]


# -- crashes around the answer --------------------------------------------------------------


def test_an_approved_call_interrupted_by_a_crash_runs_again_with_its_key(db_url: str) -> None:
    shop = Shop(crash_in_refund=True)
    with Runner(db_url) as runner:
        runner.run(shop.agent, "refund", id="k1")
        runner.approve("k1")
        with pytest.raises(Crash):
            runner.resume("k1", agent=shop.agent)
        crash(runner.engine, "k1")  # its worker is dead: the lease is free
        done = runner.resume("k1", agent=shop.agent)
    assert done.output == "refunded 250"
    assert shop.refunds == [("k1-1", 1), ("k1-1", 2)]  # the same key; the second attempt
    assert shop.model.calls == 2


def test_an_approved_plain_call_interrupted_by_a_crash_is_not_run_again(db_url: str) -> None:
    ran: list[int] = []

    @tool(approval=True)
    def pay(amount: int) -> str:  # no key, not idempotent: it must never run twice
        ran.append(amount)
        raise Crash

    def model(transcript: Transcript) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        if not seen:
            return {"type": "tool", "name": "pay", "args": {"amount": 9}}
        return {"type": "final", "content": seen[-1]["content"]}

    agent = Agent(model, {"pay": pay})
    with Runner(db_url) as runner:
        runner.run(agent, "pay", id="k2")
        runner.approve("k2")
        with pytest.raises(Crash):
            runner.resume("k2", agent=agent)
        crash(runner.engine, "k2")
        done = runner.resume("k2", agent=agent)
    assert ran == [9]
    assert str(done.output).startswith("OutcomeUnknown: pay was interrupted before its outcome")


# -- blocking until an answer --------------------------------------------------------------------


def test_run_with_wait_blocks_until_the_answer_comes_and_goes_on(db_url: str) -> None:
    shop = Shop()
    with Runner(db_url) as runner, Runner(db_url) as other:

        def answerer() -> None:  # another person, as soon as the run waits
            while True:
                try:
                    if other.row("wait-1").status is RunStatus.WAITING:
                        other.approve("wait-1", by="later")
                        return
                except RunNotFound:
                    pass
                threading.Event().wait(0.02)

        thread = threading.Thread(target=answerer)
        thread.start()
        done = runner.run(shop.agent, "refund", id="wait-1", wait=True)
        thread.join(30)
    assert (done.status, done.output) == ("finished", "refunded 250")
    assert shop.refunds == [("wait-1-1", 1)]


def test_run_with_wait_goes_on_when_answered_before_its_result_is_read(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer lands between the park's commit and the read of the run's result (the
    run queued again by then): run(wait=True) goes on, it does not return it `queued`."""
    shop = Shop()
    with Runner(db_url) as runner, Runner(db_url) as other:
        read = runner.get

        def answered_first(run_id: str) -> Any:
            if other.row(run_id).status is RunStatus.WAITING:
                other.approve(run_id, by="quick")
            return read(run_id)

        monkeypatch.setattr(runner, "get", answered_first)
        done = runner.run(shop.agent, "refund", id="wait-2", wait=True)
    assert (done.status, done.output) == ("finished", "refunded 250")
    assert shop.refunds == [("wait-2-1", 1)]


def test_wait_for_answer_returns_when_the_run_is_answered(db_url: str) -> None:
    shop = Shop()
    with Runner(db_url) as runner:
        runner.run(shop.agent, "refund", id="wf")
        assert runner.wait_for_answer("wf", poll=0.01, timeout=0.05).status is RunStatus.WAITING
        timer = threading.Timer(0.1, lambda: runner.deny("wf", reason="no"))
        timer.start()
        row = runner.wait_for_answer("wf", poll=0.02, timeout=30)
        timer.join()
    assert row.status is RunStatus.QUEUED


def test_waiting_runs_are_listed_with_what_they_wait_for(db_url: str) -> None:
    with Runner(db_url) as runner:
        for n in range(3):
            runner.run(Shop(amount=200 + n).agent, "refund", id=f"l{n}")
        runner.approve("l1")
        waiting = runner.list(status=RunStatus.WAITING)
        assert sorted(r.id for r in waiting) == ["l0", "l2"]
        waits = runner.waits(runner.list())
        assert sorted(waits) == ["l0", "l2"]
        assert waits["l2"].question == "refund(amount=202)"
        with runner.engine.begin() as connection:  # what the index serves: expiring waits
            expired = connection.execute(
                select(func.count())
                .select_from(runs)
                .where(runs.c.status == "waiting", runs.c.wait_expires_at.is_(None))
            ).scalar_one()
        assert expired == 2
        assert runner.get("l0").waiting == waits["l0"]
        assert runner.get("l1").waiting is None


def test_a_run_blocked_on_its_wait_goes_on_when_approval_timeout_passes(db_url: str) -> None:
    clock = ManualClock()
    shop = Shop()
    outcome: list[Any] = []
    with Runner(db_url, clock=clock) as runner:
        blocked = threading.Thread(
            target=lambda: outcome.append(
                runner.run(shop.agent, "refund", id="bt", approval_timeout=30, wait=True)
            )
        )
        blocked.start()
        for _ in range(1000):  # until it waits (real time: the run's own steps)
            if _waiting(runner, "bt"):
                break
            threading.Event().wait(0.01)
        clock.advance(31)  # nobody answered: the blocked process applies the timeout itself
        blocked.join(30)
    (done,) = outcome
    assert (done.status, done.output) == ("finished", "Denied: no answer within 30s")
    assert shop.refunds == []


def _waiting(runner: Runner, run_id: str) -> bool:
    try:
        return runner.row(run_id).status is RunStatus.WAITING
    except RunNotFound:
        return False
