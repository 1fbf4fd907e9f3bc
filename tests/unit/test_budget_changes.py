"""Budget changes in a journal (revivals, extensions), as the loop replays them.

A journal recorded by one run is handed to the loop again with a budget change after it:
the loop replays each recorded step under the budgets it ran with, then goes on under the
new ones, asking the model only for the steps nobody recorded. No database here: a
journal that replays a list of entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from runner import ReplayMismatch, run_agent
from runner.core.budget_changes import (
    applied,
    before_changes,
    changed,
    changes_of,
    describe,
    lift_problems,
    room_problems,
)
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.loop import drive
from runner.core.stop_reasons import StopReason
from runner.core.tools import as_tools, current_call, tool

Transcript = list[dict[str, Any]]


@dataclass
class Replaying:
    """A journal that replays `entries` and records what comes after them."""

    entries: list[Entry]
    run_id: str = "r"
    written: list[Entry] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)

    def recorded(self) -> Sequence[Entry]:
        return list(self.entries)

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.written.append(entry)
        if stop is not None:
            self.stops.append(stop)

    def finish(self, stop: Stop, counters: Counters) -> None:
        self.stops.append(stop)

    def cancel_requested(self) -> bool:
        return False

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        return ()

    def attempt(self, action: Entry) -> int:
        self.attempts.append(action.idempotency_key or "")
        return 2


class Searcher:
    """Searches for 1, 2, 3, ... then answers after `answer_after` observations."""

    def __init__(self, answer_after: int = 100, tokens: int = 10) -> None:
        self.answer_after = answer_after
        self.tokens = tokens
        self.asked: list[int] = []

    def __call__(self, transcript: Transcript) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        self.asked.append(len(seen) + 1)
        if len(seen) >= self.answer_after:
            return {"type": "final", "content": f"done after {len(seen)}", "usage": self.tokens}
        return {"type": "tool", "name": "search", "args": {"q": len(seen) + 1}, "usage": 10}


SEARCHED: list[str] = []


@tool(idempotent=True)
def search(q: int) -> str:
    call = current_call()
    SEARCHED.append(call.idempotency_key if call else "?")
    return f"results for {q}"


TOOLS = as_tools({"search": search})


def record(model: Any, budgets: Budgets) -> tuple[list[Entry], Stop]:
    """Run once in memory; the entries it wrote and how it stopped."""
    journal = Replaying([])
    drive(model, TOOLS, "find", budgets, journal)
    return journal.written, journal.stops[-1]


def revival(after: Sequence[Entry], before: Budgets, now: Budgets, stop: Stop) -> Entry:
    last = after[-1]
    return Entry(
        EntryKind.REVIVED,
        last.counters.steps,
        last.counters,
        content="revived",
        args={"budgets": changed(before, now), "stop_reason": str(stop.reason)},
    )


def test_a_revival_after_max_steps_goes_on_from_the_next_step() -> None:
    first = Budgets(max_steps=2, max_repeats=None)
    entries, stop = record(Searcher(answer_after=4), first)
    assert stop.reason is StopReason.MAX_STEPS
    more = replace(first, max_steps=6)
    journal = Replaying([*entries, revival(entries, first, more, stop)])
    model = Searcher(answer_after=4)
    result = drive(model, TOOLS, "find", more, journal)
    # Steps 1 and 2 came from the journal; the model was asked for 3, 4 and 5 only.
    assert model.asked == [3, 4, 5]
    assert (result.stop_reason, result.output, result.steps) == ("final", "done after 4", 5)
    assert [e.kind for e in journal.written] == ["action", "observation"] * 2 + ["final"]
    assert [e.step for e in journal.written] == [3, 3, 4, 4, 5]
    # The transcript is the one an uninterrupted run with the larger cap has.
    uninterrupted = run_agent(
        Searcher(answer_after=4), TOOLS, "find", max_steps=6, max_repeats=None
    )
    assert result.transcript == uninterrupted.transcript
    assert result.tokens == uninterrupted.tokens


def test_without_the_revival_the_same_journal_is_a_finished_run() -> None:
    first = Budgets(max_steps=2, max_repeats=None)
    entries, _ = record(Searcher(answer_after=4), first)
    # Given the new budgets but no revival entry, the loop replays under them and goes on:
    # what the journal says, not the budgets passed, decides where a replay stops.
    journal = Replaying(list(entries))
    result = drive(Searcher(answer_after=4), TOOLS, "find", first, journal)
    assert result.stop_reason is StopReason.MAX_STEPS and journal.written == []


def test_a_refused_step_stays_refused_and_the_model_is_asked_again() -> None:
    first = Budgets(max_tokens=25, max_repeats=None)  # the third model call goes over
    entries, stop = record(Searcher(answer_after=3), first)
    assert stop.reason is StopReason.TOKEN_BUDGET
    assert entries[-1].kind is EntryKind.REFUSED and entries[-1].step == 3
    more = replace(first, max_tokens=1000)
    journal = Replaying([*entries, revival(entries, first, more, stop)])
    SEARCHED.clear()
    model = Searcher(answer_after=3)
    result = drive(model, TOOLS, "find", more, journal)
    assert model.asked == [3, 4]  # steps 4 and 5: the refused call of step 3 never ran
    assert SEARCHED == ["r-4"]
    assert (result.stop_reason, result.steps) == ("final", 5)
    assert result.tokens == 5 * 10  # every model call's, the refused one's too


def test_a_revival_after_a_pending_call_settles_it_under_its_own_key() -> None:
    first = Budgets(max_repeats=None)
    entries, _ = record(Searcher(answer_after=2), first)
    pending = [e for e in entries if e.step <= 1][:-1]  # task, action of step 1
    # A fork's copy keeps the key its call ran with: the settlement must use that one.
    pending[-1] = replace(pending[-1], idempotency_key="parent-1")
    more = replace(first, max_steps=9)
    revived = revival(pending, first, more, Stop(StopReason.CRASH_LOOP))
    journal = Replaying([*pending, revived])
    SEARCHED.clear()
    result = drive(Searcher(answer_after=2), TOOLS, "find", more, journal)
    assert journal.attempts == ["parent-1"]
    assert SEARCHED == ["parent-1", "r-2"]  # re-run with its key; the next call has ours
    assert journal.written[0].idempotency_key == "parent-1"
    assert result.stop_reason == "final"


def test_a_change_recorded_at_the_start_applies_to_every_step() -> None:
    extended = Entry(
        EntryKind.EXTENDED,
        0,
        Counters(),
        content="budgets changed",
        args={"budgets": {"max_steps": [0, 3]}},
    )
    task = Entry(EntryKind.TASK, 0, Counters(), content="find")
    journal = Replaying([task, extended])
    result = drive(Searcher(), TOOLS, "find", Budgets(max_steps=3, max_repeats=None), journal)
    assert (result.stop_reason, result.steps) == ("max_steps", 3)


def test_a_loop_that_stops_before_the_journal_ends_is_a_replay_mismatch() -> None:
    entries, _ = record(Searcher(answer_after=4), Budgets(max_repeats=None))
    journal = Replaying(list(entries))
    with pytest.raises(ReplayMismatch) as raised:
        drive(Searcher(), TOOLS, "find", Budgets(max_steps=2), journal)
    assert raised.value.step == 2
    assert raised.value.recorded.kind is EntryKind.ACTION
    assert raised.value.recorded.step == 3
    assert raised.value.now == "stops with max_steps"
    assert journal.written == []


def test_a_decision_that_changed_names_its_step() -> None:
    entries, _ = record(Searcher(answer_after=1), Budgets())
    journal = Replaying(list(entries))
    with pytest.raises(ReplayMismatch) as raised:
        drive(Searcher(), TOOLS, "find", Budgets(max_tokens=5), journal)
    assert raised.value.step == 1
    assert raised.value.now == "refuses the action (token_budget)"


# -- the rules ----------------------------------------------------------------------------


def test_changes_round_trip_through_an_entry() -> None:
    before, after = Budgets(), Budgets(max_steps=50, max_tokens=None)
    changes = changed(before, after)
    assert changes == {"max_steps": [8, 50], "max_tokens": [10_000, None]}
    entry = Entry(EntryKind.REVIVED, 8, Counters(), args={"budgets": changes})
    assert changes_of(entry) == {"max_steps": (8, 50), "max_tokens": (10_000, None)}
    assert applied(before, entry) == after
    assert before_changes(after, [entry]) == before
    assert describe(changes) == "max_steps 8 -> 50, max_tokens 10000 -> none"
    assert describe({}) == "no budget changed"


def test_room_problems_name_each_budget_already_spent() -> None:
    spent = Counters(steps=8, tokens=500, cost=0.5, error_streak=3)
    assert room_problems(Budgets(max_steps=9, max_tokens=500, max_cost=0.5), spent) == [
        "max_consecutive_errors 2 is below the 3 failed steps in a row"
    ]
    problems = room_problems(
        Budgets(max_steps=8, max_tokens=499, max_cost=0.4, max_consecutive_errors=3), spent
    )
    assert problems == [
        "max_steps 8 leaves no step: the run has taken 8",
        "max_tokens 499 is below the 500 spent",
        "max_cost 0.4 is below the 0.5 spent",
    ]


def test_lift_problems() -> None:
    base = Budgets(max_repeats=2)
    assert lift_problems(StopReason.TIME_BUDGET, base, base, ()) != []
    assert lift_problems(StopReason.TIME_BUDGET, base, base, ("max_seconds",)) == []
    assert lift_problems(StopReason.REPEATED_CALL, base, base, ()) != []
    assert lift_problems(StopReason.REPEATED_CALL, base, Budgets(max_repeats=3), ()) == []
    assert lift_problems(StopReason.REPEATED_CALL, base, Budgets(max_repeats=None), ()) == []
    assert lift_problems(StopReason.MAX_STEPS, base, base, ()) == []  # room_problems says it
