"""A step of several calls, some needing a person's answer, without a database: the step
waits for every answer it needs before any of its calls runs (even one that needs none),
each call is settled by its own answer, and `run_agent`, which has nobody to ask, raises
RunWaiting before any call of such a step runs, as it does for a single call."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from runner import RunWaiting, ask_human, current_call, run_agent, tool
from runner.core.actions import ActionKind
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.loop import drive
from runner.core.tools import Tool, as_tools
from runner.core.waiting import Answer, Asks

Transcript = list[dict[str, Any]]

CALLS = [
    {"id": "l", "name": "lookup", "args": {"order": "1042"}},
    {"id": "r", "name": "refund", "args": {"amount": 249}},
    {"id": "q", "name": "ask", "args": {"question": "Why?"}},
]


def model(transcript: Transcript) -> dict[str, Any]:
    seen = {m["id"]: m["content"] for m in transcript if m["role"] == "tool"}
    if not seen:
        return {"type": "tool", "calls": CALLS}
    return {"type": "final", "content": " | ".join(seen[k] for k in ("l", "r", "q"))}


class Desk:
    def __init__(self) -> None:
        self.ran: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()

    def tools(self) -> dict[str, Tool]:
        @tool(approval=True)
        def refund(amount: int, idempotency_key: str) -> str:
            self.note("refund")
            return f"refunded {amount}"

        def lookup(order: str) -> str:
            self.note("lookup")
            return f"order {order}"

        return as_tools({"lookup": lookup, "refund": refund, "ask": ask_human})

    def note(self, name: str) -> None:
        call = current_call()
        assert call is not None
        with self.lock:
            self.ran.append((name, call.idempotency_key, call.attempt))


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

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        self.written.extend(entries)
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


C = Counters(steps=1)


def actions() -> list[Entry]:
    return [
        Entry(EntryKind.ACTION, 1, C, action_type=ActionKind.TOOL, tool=c["name"],
              args=c["args"], idempotency_key=f"r-1.{n}", call_id=c["id"])
        for n, c in enumerate(CALLS, 1)
    ]  # fmt: skip


def wait(key: str, tool_name: str, asks: Asks) -> Entry:
    return Entry(EntryKind.WAIT, 1, C, tool=tool_name, idempotency_key=key, waits_for=asks)


def answer(key: str, given: Answer, text: str | None = None) -> Entry:
    return Entry(EntryKind.ANSWER, 1, C, idempotency_key=key, answer=given, content=text)


WAITS = [wait("r-1.2", "refund", Asks.APPROVAL), wait("r-1.3", "ask", Asks.REPLY)]


def test_run_agent_raises_run_waiting_before_any_call_of_the_step_runs() -> None:
    desk = Desk()
    with pytest.raises(RunWaiting, match=r"refund needs a person's approval, ask needs a "
                       r"person's reply, and an in-memory run has nobody to ask"):  # fmt: skip
        run_agent(model, desk.tools(), "help")
    assert desk.ran == []  # not even lookup: the step's calls wait together


def test_the_step_records_one_wait_per_call_that_needs_an_answer_and_runs_nothing() -> None:
    desk, journal = Desk(), Recorded([])
    with pytest.raises(RunWaiting, match=r"r-1\.2.*r-1\.3"):
        drive(model, desk.tools(), "help", Budgets(), journal)
    assert [(w.idempotency_key, w.tool, w.waits_for) for w in journal.waits] == [
        ("r-1.2", "refund", Asks.APPROVAL),
        ("r-1.3", "ask", Asks.REPLY),
    ]
    assert [w.content for w in journal.waits] == ["refund(amount=249)", "Why?"]
    assert [e.kind for e in journal.written] == [EntryKind.TASK, *[EntryKind.ACTION] * 3]
    assert desk.ran == []


def test_a_step_with_an_answer_still_missing_keeps_waiting() -> None:
    desk = Desk()
    journal = Recorded([_task(), *actions(), *WAITS, answer("r-1.3", Answer.REPLIED, "lost")])
    with pytest.raises(RunWaiting, match=r"r-1\.2"):
        drive(model, desk.tools(), "help", Budgets(), journal)
    assert desk.ran == [] and journal.written == [] and journal.waits == []


def test_each_call_is_settled_by_its_own_answer_once_all_are_in() -> None:
    desk = Desk()
    answers = [answer("r-1.3", Answer.REPLIED, "lost"), answer("r-1.2", Answer.APPROVED)]
    journal = Recorded([_task(), *actions(), *WAITS, *answers])
    result = drive(model, desk.tools(), "help", Budgets(), journal)
    assert (result.stop_reason, result.output) == ("final", "order 1042 | refunded 249 | lost")
    # First attempts: approved and unasked calls alike, none of them tried before.
    assert sorted(desk.ran) == [("lookup", "r-1.1", 1), ("refund", "r-1.2", 1)]
    observed = {e.idempotency_key: e for e in journal.written if e.kind is EntryKind.OBSERVATION}
    assert sorted(observed) == ["r-1.1", "r-1.2", "r-1.3"]
    assert (observed["r-1.3"].content, observed["r-1.3"].is_error) == ("lost", False)
    assert journal.waits == []


def test_a_denied_call_is_denied_alone() -> None:
    desk = Desk()
    answers = [answer("r-1.2", Answer.DENIED, "too much"), answer("r-1.3", Answer.DENIED, "no")]
    journal = Recorded([_task(), *actions(), *WAITS, *answers])
    result = drive(model, desk.tools(), "help", Budgets(), journal)
    assert result.output == "order 1042 | Denied: too much | Denied: no"
    assert [name for name, _, _ in desk.ran] == ["lookup"]


def test_after_a_crash_past_the_answers_every_call_is_settled_by_its_declaration() -> None:
    desk = Desk()
    answers = [answer("r-1.2", Answer.APPROVED), answer("r-1.3", Answer.REPLIED, "lost")]
    journal = Recorded([_task(), *actions(), *WAITS, *answers], attempt_now=2)
    result = drive(model, desk.tools(), "help", Budgets(), journal)
    # refund takes a key: run again with it. lookup is plain: it may have run, so unknown.
    assert desk.ran == [("refund", "r-1.2", 2)]
    assert str(result.output).startswith("OutcomeUnknown: lookup was interrupted")


def _task() -> Entry:
    return Entry(EntryKind.TASK, 0, Counters(), content="help")
