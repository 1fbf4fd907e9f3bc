"""Start marks without a database: a tool declared `mark_start` has a `start` entry
journaled just before each call, so a call a crash left pending without one never started
and runs; with one it may have started, and stays OutcomeUnknown (as every pending call of
a plain tool does without the declaration)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runner import Tool, current_call
from runner.core.actions import ActionKind
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, MemoryJournal, Stop, transcript_of
from runner.core.loop import drive
from runner.core.tools import as_tools

Transcript = list[dict[str, Any]]


class Notices:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def tools(self, *, marked: bool = True) -> dict[str, Tool]:
        def notify(text: str) -> str:
            call = current_call()
            assert call is not None
            self.sent.append((call.idempotency_key, call.attempt))
            return f"sent {text}"

        return as_tools({"notify": Tool(notify, mark_start=marked)})


def one_call(transcript: Transcript) -> dict[str, Any]:
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "notify", "args": {"text": "hi"}}
    return {"type": "final", "content": seen[-1]["content"]}


def two_calls(transcript: Transcript) -> dict[str, Any]:
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        calls = [{"name": "notify", "args": {"text": t}, "id": t} for t in ("a", "b")]
        return {"type": "tool", "calls": calls}
    return {"type": "final", "content": " | ".join(m["content"] for m in seen)}


@dataclass
class Recorded:
    entries: list[Entry]
    attempt_now: int = 2
    run_id: str = "r"
    written: list[Entry] = field(default_factory=list)
    stop: Stop | None = None

    def recorded(self) -> Sequence[Entry]:
        return self.entries

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.written.append(entry)
        self.stop = stop or self.stop

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        self.written.extend(entries)

    def finish(self, stop: Stop, counters: Counters) -> None:
        self.stop = stop

    def cancel_requested(self) -> bool:
        return False

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        return ()

    def attempt(self, action: Entry) -> int:
        return self.attempt_now

    def wait(self, entries: Sequence[Entry]) -> bool:
        raise AssertionError("nothing waits here")


C = Counters(steps=1)
TASK = Entry(EntryKind.TASK, 0, Counters(), content="t")


def action(key: str, text: str = "hi") -> Entry:
    call_id = None if key == "r-1" else text
    return Entry(EntryKind.ACTION, 1, C, action_type=ActionKind.TOOL, tool="notify",
                 args={"text": text}, idempotency_key=key, call_id=call_id)  # fmt: skip


def start(key: str) -> Entry:
    return Entry(EntryKind.START, 1, C, tool="notify", idempotency_key=key, attempt=1)


def test_a_marked_call_is_journaled_as_started_just_before_it_runs() -> None:
    notices, journal = Notices(), MemoryJournal(run_id="r")
    result = drive(one_call, notices.tools(), "t", Budgets(), journal)
    assert result.output == "sent hi"
    assert [e.kind for e in journal.entries] == [
        EntryKind.TASK, EntryKind.ACTION, EntryKind.START, EntryKind.OBSERVATION, EntryKind.FINAL,
    ]  # fmt: skip
    mark = journal.entries[2]
    assert (mark.tool, mark.idempotency_key, mark.attempt) == ("notify", "r-1", 1)
    assert transcript_of(journal.entries) == result.transcript  # the mark is never shown


def test_an_unmarked_tool_writes_no_start() -> None:
    journal = MemoryJournal(run_id="r")
    drive(one_call, Notices().tools(marked=False), "t", Budgets(), journal)
    assert EntryKind.START not in [e.kind for e in journal.entries]


def test_a_pending_call_without_its_start_mark_never_started_and_runs() -> None:
    notices, journal = Notices(), Recorded([TASK, action("r-1")])
    result = drive(one_call, notices.tools(), "t", Budgets(), journal)
    assert result.output == "sent hi"
    assert notices.sent == [("r-1", 2)]  # a process before this one took the run up
    assert [e.kind for e in journal.written] == [
        EntryKind.START, EntryKind.OBSERVATION, EntryKind.FINAL,
    ]  # fmt: skip


def test_a_pending_call_with_its_start_mark_may_have_run_and_is_unknown() -> None:
    notices, journal = Notices(), Recorded([TASK, action("r-1"), start("r-1")])
    result = drive(one_call, notices.tools(), "t", Budgets(), journal)
    assert notices.sent == []
    assert str(result.output).startswith("OutcomeUnknown: notify was interrupted")
    assert "crash" not in str(result.output)


def test_without_the_declaration_a_pending_plain_call_stays_unknown() -> None:
    notices, journal = Notices(), Recorded([TASK, action("r-1")])
    result = drive(one_call, notices.tools(marked=False), "t", Budgets(), journal)
    assert notices.sent == []
    assert str(result.output).startswith("OutcomeUnknown: notify was interrupted")


def test_in_a_step_of_several_calls_each_call_is_judged_by_its_own_mark() -> None:
    notices = Notices()
    journal = Recorded([TASK, action("r-1.1", "a"), action("r-1.2", "b"), start("r-1.1")])
    result = drive(two_calls, notices.tools(), "t", Budgets(), journal)
    assert notices.sent == [("r-1.2", 2)]
    first, second = str(result.output).split(" | ")
    assert first.startswith("OutcomeUnknown: notify was interrupted") and second == "sent b"
    entries = [*journal.entries, *journal.written]
    assert transcript_of(entries) == result.transcript
