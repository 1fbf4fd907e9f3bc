"""People in the loop, without a database: which calls wait, and what the loop does with a
wait and its answer when it replays them (approved: the call runs; denied: `Denied: ...`;
replied: the reply), through a journal that holds what a durable one would."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from runner import (
    Agent,
    RunWaiting,
    Tool,
    ask_human,
    current_call,
    run_agent,
    tool,
)
from runner.core.actions import ActionKind
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.loop import drive
from runner.core.stop_reasons import StopReason
from runner.core.tools import as_tools
from runner.core.waiting import Answer, Asks, observation_of, timed_out_reason
from runner.models.schemas import tool_spec

Transcript = list[dict[str, Any]]


# -- which calls wait -------------------------------------------------------------------------


def test_approval_true_false_and_by_the_arguments() -> None:
    @tool(approval=True)
    def always(n: int) -> int:
        return n

    @tool(approval=lambda args: args["amount"] > 100)
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    plain = Tool(lambda: None)
    assert always.asks({"n": 1}) is Asks.APPROVAL
    assert refund.asks({"amount": 250}) is Asks.APPROVAL
    assert refund.asks({"amount": 100}) is None
    assert plain.asks({}) is None
    assert ask_human.asks({"question": "why?"}) is Asks.REPLY
    assert (plain.approval, plain.replies) == (False, False)


def test_a_rule_that_cannot_decide_asks_rather_than_waves_the_call_on() -> None:
    @tool(approval=lambda args: args["amount"] > 100)
    def refund(amount: int) -> str:
        return "refunded"

    assert refund.asks({}) is Asks.APPROVAL  # KeyError in the rule
    assert refund.asks({"amount": "lots"}) is Asks.APPROVAL  # TypeError in the rule
    assert refund.asks(None) is Asks.APPROVAL


def test_an_approval_that_is_neither_a_bool_nor_a_function_is_refused() -> None:
    with pytest.raises(ValueError, match="approval must be True, False or a function"):
        Tool(lambda: None, approval="yes")  # type: ignore[arg-type]


def test_ask_human_shows_the_model_one_question_argument() -> None:
    spec = tool_spec("ask_human", ask_human)
    assert spec.parameters["required"] == ["question"]
    assert spec.parameters["properties"]["question"]["type"] == "string"
    assert spec.description is not None and spec.description.startswith("Ask a person")
    with pytest.raises(RuntimeError, match="answered by a person"):
        ask_human(question="anyone?")


def test_what_the_model_is_shown_for_each_answer() -> None:
    assert observation_of(Answer.APPROVED, "fine") is None  # the tool's result is
    assert observation_of(Answer.DENIED, "too much") == ("Denied: too much", True)
    assert observation_of(Answer.REPLIED, "blue") == ("blue", False)
    reason = timed_out_reason(3600)
    assert reason == "no answer within 3600s"
    assert observation_of(Answer.TIMED_OUT, reason) == ("Denied: no answer within 3600s", True)


def test_approval_timeout_is_a_budget_of_seconds() -> None:
    assert Budgets(approval_timeout=30).approval_timeout == 30
    for bad in (0, -1, "soon", True):
        with pytest.raises(ValueError, match="approval_timeout"):
            Budgets(approval_timeout=bad)  # type: ignore[arg-type]


# -- in memory: nobody to ask -------------------------------------------------------------------


def refund_model(amount: int) -> Any:
    def model(tr: Transcript) -> dict[str, Any]:
        seen = [m for m in tr if m["role"] == "tool"]
        if not seen:
            return {"type": "tool", "name": "refund", "args": {"amount": amount}}
        return {"type": "final", "content": seen[-1]["content"]}

    return model


def test_run_agent_cannot_wait_and_says_so() -> None:
    ran: list[int] = []

    @tool(approval=lambda args: args["amount"] > 100)
    def refund(amount: int) -> str:
        ran.append(amount)
        return f"refunded {amount}"

    with pytest.raises(RunWaiting, match="durable Runner") as raised:
        run_agent(refund_model(250), {"refund": refund}, "refund it")
    assert raised.value.run_id
    assert ran == []
    small = run_agent(refund_model(50), {"refund": refund}, "refund it")
    assert (small.stop_reason, small.output, ran) == ("final", "refunded 50", [50])


# -- replaying a wait and its answer ------------------------------------------------------------


@dataclass
class Recorded:
    """A journal holding what a durable run wrote before this process took it over."""

    entries: list[Entry]
    attempt_now: int = 1
    run_id: str = "r"
    written: list[Entry] = field(default_factory=list)
    waits: list[Entry] = field(default_factory=list)
    stop: Stop | None = None

    def recorded(self) -> Sequence[Entry]:
        return self.entries

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.written.append(entry)
        self.stop = stop or self.stop

    def finish(self, stop: Stop, counters: Counters) -> None:
        self.stop = stop

    def cancel_requested(self) -> bool:
        return False

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        return ()

    def attempt(self, action: Entry) -> int:
        return self.attempt_now

    def wait(self, entries: Sequence[Entry]) -> bool:
        # The step's calls not recorded yet come first, written with their waits.
        self.written.extend(e for e in entries if e.kind is not EntryKind.WAIT)
        self.waits.extend(e for e in entries if e.kind is EntryKind.WAIT)
        return True


def waited(kind: Answer | None, text: str | None = None) -> list[Entry]:
    """task, step 1's refund action and its wait, and the answer if `kind`."""
    c = Counters(steps=1)
    args = {"amount": 250}
    entries = [
        Entry(EntryKind.TASK, 0, Counters(), content="refund it"),
        Entry(
            EntryKind.ACTION, 1, c, action_type=ActionKind.TOOL, tool="refund", args=args,
            idempotency_key="r-1",
        ),
        Entry(
            EntryKind.WAIT, 1, c, tool="refund", args=args, idempotency_key="r-1",
            content="refund(amount=250)", waits_for=Asks.APPROVAL,
        ),
    ]  # fmt: skip
    if kind is not None:
        entries.append(
            Entry(
                EntryKind.ANSWER, 1, c, tool="refund", idempotency_key="r-1", content=text,
                answer=kind, answered_by="ann",
            )
        )  # fmt: skip
    return entries


class Refunds:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.model_calls = 0

    def tools(self) -> dict[str, Tool]:
        @tool(approval=True)
        def refund(amount: int, idempotency_key: str) -> str:
            call = current_call()
            assert call is not None
            self.calls.append((idempotency_key, call.attempt))
            return f"refunded {amount}"

        return as_tools({"refund": refund})

    def model(self, tr: Transcript) -> dict[str, Any]:
        self.model_calls += 1
        return refund_model(250)(tr)


def replay(journal: Recorded, refunds: Refunds) -> Any:
    return drive(refunds.model, refunds.tools(), "refund it", Budgets(), journal)


def test_an_approved_call_runs_once_as_a_first_attempt_and_the_model_is_not_asked_again() -> None:
    refunds, journal = Refunds(), Recorded(waited(Answer.APPROVED, "ok"))
    result = replay(journal, refunds)
    assert (result.stop_reason, result.output) == ("final", "refunded 250")
    assert refunds.calls == [("r-1", 1)]
    assert refunds.model_calls == 1  # only step 2's: step 1 was replayed
    observation = journal.written[0]
    assert (observation.kind, observation.attempt, observation.content) == (
        EntryKind.OBSERVATION, 1, "refunded 250"
    )  # fmt: skip
    assert journal.waits == []


@dataclass
class HoldingBack(Recorded):
    """A journal that can hold an entry back for its next write, as a durable one does."""

    later: list[Entry] = field(default_factory=list)

    def append_with_next(self, entry: Entry) -> None:
        self.later.append(entry)


@pytest.mark.parametrize(
    "answer", [Answer.APPROVED, Answer.DENIED, Answer.TIMED_OUT], ids=lambda a: a.value
)
def test_an_observation_its_answer_decides_alone_rides_in_the_next_write(answer: Answer) -> None:
    """A denial (or a timeout, a reply, a child's end) decides the observation alone: a
    resume derives it again from the answer, so it waits for the run's next write. After an
    approval the tool ran: its observation is written at once."""
    refunds, journal = Refunds(), HoldingBack(waited(answer, "no"))
    replay(journal, refunds)
    kinds = [entry.kind for entry in journal.written]
    if answer is Answer.APPROVED:
        assert (kinds, journal.later) == ([EntryKind.OBSERVATION, EntryKind.FINAL], [])
    else:
        assert kinds == [EntryKind.FINAL]
        assert [entry.kind for entry in journal.later] == [EntryKind.OBSERVATION]


def test_an_approved_call_a_crash_interrupted_is_settled_like_any_pending_call() -> None:
    refunds, journal = Refunds(), Recorded(waited(Answer.APPROVED), attempt_now=2)
    replay(journal, refunds)
    assert refunds.calls == [("r-1", 2)]  # key-aware: run again with its key, attempt 2


def test_a_denied_call_never_runs_and_the_model_reads_why() -> None:
    refunds, journal = Refunds(), Recorded(waited(Answer.DENIED, "over the limit"))
    result = replay(journal, refunds)
    assert refunds.calls == []
    assert result.output == "Denied: over the limit"
    observation = journal.written[0]
    assert (observation.is_error, observation.counters.error_streak) == (True, 1)
    assert result.transcript[2] == {
        "role": "tool", "name": "refund", "content": "Denied: over the limit", "is_error": True,
    }  # fmt: skip


def test_a_timed_out_wait_is_a_denial_that_says_so() -> None:
    refunds = Refunds()
    journal = Recorded(waited(Answer.TIMED_OUT, timed_out_reason(60)))
    assert replay(journal, refunds).output == "Denied: no answer within 60s"
    assert refunds.calls == []


def test_a_wait_with_no_answer_yet_stops_the_run_again() -> None:
    refunds, journal = Refunds(), Recorded(waited(None))
    with pytest.raises(RunWaiting, match="approval"):
        replay(journal, refunds)
    assert (refunds.calls, journal.written, journal.waits) == ([], [], [])


def test_a_call_whose_action_was_recorded_but_not_its_wait_waits_now() -> None:
    # A crash between the action's commit and the wait's: nothing ran, so the run waits.
    refunds, journal = Refunds(), Recorded(waited(None)[:2])
    with pytest.raises(RunWaiting):
        replay(journal, refunds)
    (wait,) = journal.waits
    assert (wait.kind, wait.step, wait.idempotency_key, wait.waits_for) == (
        EntryKind.WAIT, 1, "r-1", "approval"
    )  # fmt: skip
    assert wait.content == "refund(amount=250)"
    assert refunds.calls == []


def test_a_reply_is_ask_humans_observation() -> None:
    def model(tr: Transcript) -> dict[str, Any]:
        seen = [m for m in tr if m["role"] == "tool"]
        if not seen:
            return {"type": "tool", "name": "ask", "args": {"question": "Which colour?"}}
        return {"type": "final", "content": f"you said {seen[-1]['content']}"}

    c = Counters(steps=1)
    entries = [
        Entry(EntryKind.TASK, 0, Counters(), content="paint"),
        Entry(EntryKind.ACTION, 1, c, action_type=ActionKind.TOOL, tool="ask",
              args={"question": "Which colour?"}, idempotency_key="r-1"),
        Entry(EntryKind.WAIT, 1, c, tool="ask", idempotency_key="r-1",
              content="Which colour?", waits_for=Asks.REPLY),
        Entry(EntryKind.ANSWER, 1, c, tool="ask", idempotency_key="r-1", content="blue",
              answer=Answer.REPLIED, answered_by="ann"),
    ]  # fmt: skip
    journal = Recorded(entries)
    agent = Agent(model, {"ask": ask_human})
    result = drive(agent.model, agent.tools, "paint", Budgets(), journal)
    assert result.output == "you said blue"
    assert (journal.written[0].content, journal.written[0].is_error) == ("blue", False)


def test_a_cancel_that_came_first_ends_the_run_where_it_would_have_waited() -> None:
    class CancelledFirst(Recorded):
        def wait(self, entries: Sequence[Entry]) -> bool:
            self.waits.extend(entries)
            return False

    refunds, journal = Refunds(), CancelledFirst(waited(None)[:2])
    result = replay(journal, refunds)
    assert result.stop_reason is StopReason.CANCELLED
    assert refunds.calls == []
