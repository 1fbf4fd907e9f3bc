"""A step of several calls that waits for people, on SQLite and PostgreSQL, through the
Python API: the step parks until every needed answer is in (no call of it runs before,
not even one that needs none), each call is settled by its own answer, a timeout denies
every call still open, and the views pair each call with its own wait and answer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import text

from runner import Agent, NotWaiting, Runner, WrongAnswer, ask_human, current_call, tool
from runner.core.clock import ManualClock
from runner.core.status import RunStatus
from runner.core.waiting import Answer, Asks
from runner.sql import leases
from runner.testing import FunctionModel

from .support import Crash, Transcript, crash, entry_rows

OWNER = "test-worker"


class Desk:
    """Step 1 asks at once for lookup (needs nothing), refund (needs approval) and
    ask_human (needs a reply); step 2 answers with what each call gave."""

    def __init__(self, *, crash_in_refund: bool = False) -> None:
        self.ran: list[tuple[str, str, int]] = []  # (tool, key, attempt) of each real call
        self.crash_in_refund = crash_in_refund
        self.lock = threading.Lock()

        def lookup(order: str) -> str:
            self._ran("lookup")
            return f"order {order}: paid 250"

        @tool(approval=True)
        def refund(amount: int, idempotency_key: str) -> str:
            self._ran("refund")
            if self.crash_in_refund:
                self.crash_in_refund = False
                raise Crash  # the process dies inside the approved call
            return f"refunded {amount}"

        def model(transcript: Transcript) -> dict[str, Any]:
            seen = {m["id"]: m["content"] for m in transcript if m["role"] == "tool"}
            if not seen:
                calls = [
                    {"id": "l", "name": "lookup", "args": {"order": "1042"}},
                    {"id": "r", "name": "refund", "args": {"amount": 250}},
                    {"id": "q", "name": "ask", "args": {"question": "Why?"}},
                ]
                return {"type": "tool", "calls": calls}
            return {"type": "final", "content": " | ".join(seen[k] for k in ("l", "r", "q"))}

        self.model = FunctionModel(model)
        tools = {"lookup": lookup, "refund": refund, "ask": ask_human}
        self.agent = Agent(self.model, tools, name="desk", release="1")

    def _ran(self, name: str) -> None:
        call = current_call()
        assert call is not None
        with self.lock:
            self.ran.append((name, call.idempotency_key, call.attempt))


def kinds(runner: Runner, run_id: str) -> list[str]:
    return [r["kind"] for r in entry_rows(runner.engine, run_id)]


def rows(runner: Runner, sql: str) -> list[dict[str, Any]]:
    with runner.engine.connect() as connection:
        return [dict(r._mapping) for r in connection.execute(text(sql))]


def test_the_step_parks_until_every_answer_is_in_and_each_call_gets_its_own(db_url: str) -> None:
    desk = Desk()
    with Runner(db_url) as runner:
        result = runner.run(desk.agent, "help", id="p1")
        assert (result.status, result.stop_reason) == ("waiting", None)
        assert [(w.call, w.tool, w.asks) for w in result.waits] == [
            ("p1-1.2", "refund", Asks.APPROVAL),
            ("p1-1.3", "ask", Asks.REPLY),
        ]
        assert result.waiting == result.waits[0]
        assert result.waits[1].question == "Why?"
        assert kinds(runner, "p1") == ["task", *["action"] * 3, "wait", "wait"]
        assert desk.ran == []  # not even lookup, which needs no answer
        assert list(runner.waiting_calls("p1")) == result.waits
        row = runner.row("p1")
        assert (row.status, row.lease_owner) == (RunStatus.WAITING, None)

        with pytest.raises(WrongAnswer, match="waits for 2 calls: name the one"):
            runner.approve("p1")
        with pytest.raises(WrongAnswer, match="waits for a reply to its question"):
            runner.approve("p1", call="p1-1.3")
        with pytest.raises(WrongAnswer, match=r"waits for calls p1-1\.2 .*, not for p1-1\.1"):
            runner.approve("p1", call="p1-1.1")  # lookup needs no answer
        replied = runner.reply("p1", "the parcel never came", call="p1-1.3", by="ann")
        assert (replied.call, replied.answer, replied.still_waiting) == (
            "p1-1.3",
            Answer.REPLIED,
            ("p1-1.2",),
        )
        assert runner.row("p1").status is RunStatus.WAITING  # one answer of two
        assert [w.call for w in runner.waiting_calls("p1")] == ["p1-1.2"]
        with pytest.raises(NotWaiting, match=r"call p1-1\.3 was already replied by ann"):
            runner.reply("p1", "again", call="p1-1.3")
        still = runner.resume("p1", agent=desk.agent)
        assert still.status == "waiting" and desk.ran == []
        assert runner.row("p1").lease_epoch == row.lease_epoch  # nothing claimed it

        approved = runner.approve("p1", note="ok")  # the one call left: no --call needed
        assert (approved.call, approved.still_waiting) == ("p1-1.2", ())
        assert runner.row("p1").status is RunStatus.QUEUED
        done = runner.resume("p1", agent=desk.agent)
    assert (done.stop_reason, done.output) == (
        "final",
        "order 1042: paid 250 | refunded 250 | the parcel never came",
    )
    assert sorted(desk.ran) == [("lookup", "p1-1.1", 1), ("refund", "p1-1.2", 1)]
    assert desk.model.calls == 2
    with Runner(db_url) as runner:
        step_1 = kinds(runner, "p1")[1:-1]
        assert step_1[:7] == [*["action"] * 3, "wait", "wait", "answer", "answer"]
        assert sorted(step_1[7:]) == ["observation"] * 3
        calls = rows(runner, "SELECT idempotency_key, status, result FROM tool_calls ORDER BY 1")
        asked = rows(runner, "SELECT idempotency_key, answer, note FROM approvals ORDER BY 1")
    assert [(c["idempotency_key"], c["status"]) for c in calls] == [
        ("p1-1.1", "done"), ("p1-1.2", "done"), ("p1-1.3", "done"),
    ]  # fmt: skip
    assert asked == [
        {"idempotency_key": "p1-1.2", "answer": "approved", "note": "ok"},
        {"idempotency_key": "p1-1.3", "answer": "replied", "note": "the parcel never came"},
    ]


def test_a_denied_call_never_runs_its_neighbours_do(db_url: str) -> None:
    desk = Desk()
    with Runner(db_url) as runner:
        runner.run(desk.agent, "help", id="p2")
        runner.deny("p2", reason="too much", call="p2-1.2")
        runner.reply("p2", "lost", call="p2-1.3")
        done = runner.resume("p2", agent=desk.agent)
        (refund,) = rows(runner, "SELECT status FROM tool_calls WHERE tool = 'refund'")
    assert done.output == "order 1042: paid 250 | Denied: too much | lost"
    assert [name for name, _, _ in desk.ran] == ["lookup"]
    assert refund == {"status": "denied"}


def test_a_timeout_denies_every_call_still_open(db_url: str) -> None:
    clock = ManualClock()
    desk = Desk()
    with Runner(db_url, clock=clock) as runner:
        runner.run(desk.agent, "help", id="p3", approval_timeout=60)
        runner.reply("p3", "lost", call="p3-1.3")
        clock.advance(61)
        (claimed,) = leases.claim_some(
            runner.engine, limit=1, owner=OWNER, lease_seconds=30, max_resumes=3, clock=clock
        )
        assert claimed.run.id == "p3"
        done = runner.execute(claimed, desk.agent)
        answered = rows(runner, "SELECT idempotency_key, answer FROM approvals ORDER BY 1")
    assert done.output == "order 1042: paid 250 | Denied: no answer within 60s | lost"
    assert answered == [
        {"idempotency_key": "p3-1.2", "answer": "timed_out"},
        {"idempotency_key": "p3-1.3", "answer": "replied"},
    ]


def test_a_timeout_with_no_answer_in_denies_every_call_of_the_step(db_url: str) -> None:
    """Two calls of one step wait (an approval and a reply), neither answered: at the
    timeout both are denied, whether a claim or a late answer finds it."""
    for late_answer in (False, True):
        clock = ManualClock()
        desk = Desk()
        run_id = f"p5-{int(late_answer)}"
        with Runner(db_url, clock=clock) as runner:
            runner.run(desk.agent, "help", id=run_id, approval_timeout=60)
            clock.advance(61)
            if late_answer:
                with pytest.raises(NotWaiting, match="waited too long"):
                    runner.approve(run_id, call=f"{run_id}-1.2")
            (claimed,) = leases.claim_some(
                runner.engine, limit=1, owner=OWNER, lease_seconds=30, max_resumes=3, clock=clock
            )
            done = runner.execute(claimed, desk.agent)
            answered = rows(
                runner,
                f"SELECT idempotency_key, answer FROM approvals WHERE run_id = '{run_id}' "
                "ORDER BY 1",
            )
        assert done.output == (
            "order 1042: paid 250 | Denied: no answer within 60s | Denied: no answer within 60s"
        ), late_answer
        assert answered == [
            {"idempotency_key": f"{run_id}-1.2", "answer": "timed_out"},
            {"idempotency_key": f"{run_id}-1.3", "answer": "timed_out"},
        ], late_answer
        assert [name for name, _, _ in desk.ran] == ["lookup"]


def test_a_cancel_between_answers_finishes_the_run_with_nothing_run(db_url: str) -> None:
    desk = Desk()
    with Runner(db_url) as runner:
        runner.run(desk.agent, "help", id="p4")
        runner.approve("p4", call="p4-1.2")
        cancelled = runner.cancel("p4")
        assert (cancelled.status, cancelled.stop_reason) == ("finished", "cancelled")
        with pytest.raises(NotWaiting, match=r"finished \(cancelled\)"):
            runner.reply("p4", "late", call="p4-1.3")
        statuses = rows(runner, "SELECT idempotency_key, status FROM tool_calls ORDER BY 1")
    assert desk.ran == []
    assert [s["status"] for s in statuses] == ["unknown", "unknown", "unanswered"]


def test_an_approved_call_a_crash_interrupted_is_settled_and_its_neighbours_are_too(
    db_url: str,
) -> None:
    desk = Desk(crash_in_refund=True)
    with Runner(db_url) as runner:
        runner.run(desk.agent, "help", id="p5")
        runner.approve("p5", call="p5-1.2")
        runner.reply("p5", "lost", call="p5-1.3")
        with pytest.raises(Crash):
            runner.resume("p5", agent=desk.agent)
        crash(runner.engine, "p5")  # its worker is dead: the lease is free
        done = runner.resume("p5", agent=desk.agent)
    refunds = [(key, attempt) for name, key, attempt in desk.ran if name == "refund"]
    assert refunds == [("p5-1.2", 1), ("p5-1.2", 2)]  # key-aware: again, with its key
    assert str(done.output).endswith("| refunded 250 | lost")
