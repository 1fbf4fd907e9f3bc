"""The listings of a run's listed tools (an MCP server's), journaled once at step 0 and
checked on resume: the same listing goes on, a changed one stops with `tools_changed`
naming what changed, a journal begun without one is left as it is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from runner import Budgets, run_agent
from runner.core.counters import Counters
from runner.core.foreign import ForeignRun, Stopped
from runner.core.journal import Entry, EntryKind, MemoryJournal
from runner.core.loop import drive
from runner.core.stop_reasons import StopReason
from runner.core.tools import Tool
from runner.testing import ScriptedModel, call, final

LISTING = {"server": "shop", "name": "price", "annotations": {"readOnlyHint": True}}


def tools(listing: Any = LISTING) -> dict[str, Tool]:
    return {"price": Tool(lambda item: f"{item}: 5", listing=listing), "plain": Tool(str)}


@dataclass
class Resumed(MemoryJournal):
    """A memory journal that a previous process recorded `prior` in."""

    prior: list[Entry] = field(default_factory=list)

    def recorded(self) -> Sequence[Entry]:
        return self.prior


def model() -> ScriptedModel:
    return ScriptedModel([call("price", item="tea"), final("done")])


def started(listings: dict[str, Any]) -> list[Entry]:
    """What a process that died right after starting the run had journaled."""
    return [
        Entry(EntryKind.TASK, 0, Counters(), content="task"),
        Entry(EntryKind.TOOLS, 0, Counters(), args=listings),
    ]


def test_the_listings_are_journaled_once_after_the_task_and_shown_to_no_model() -> None:
    journal = MemoryJournal()
    result = drive(model(), tools(), "task", Budgets(), journal)
    assert result.stop_reason == "final"
    assert [e.kind for e in journal.entries[:2]] == [EntryKind.TASK, EntryKind.TOOLS]
    assert journal.entries[1].args == {"price": LISTING}  # tools with no listing: not there
    assert [e for e in journal.entries if e.kind is EntryKind.TOOLS] == [journal.entries[1]]
    assert result.transcript[0] == {"role": "user", "content": "task"}
    assert all(m["role"] != "tools" for m in result.transcript)


def test_a_run_without_listed_tools_journals_no_listing() -> None:
    result = run_agent(ScriptedModel([final("x")]), {"plain": str}, "task")
    assert result.stop_reason == "final"


def test_a_resume_with_the_same_listing_goes_on() -> None:
    journal = Resumed(prior=started({"price": dict(LISTING)}))
    result = drive(model(), tools(), "task", Budgets(), journal)
    assert (result.stop_reason, result.output) == ("final", "done")
    assert EntryKind.TOOLS not in [e.kind for e in journal.entries]  # not written twice


def test_a_resume_after_the_server_changed_its_tools_stops_and_names_them() -> None:
    changed = {**LISTING, "annotations": {"destructiveHint": True}}
    journal = Resumed(prior=started({"price": LISTING, "gone": {"name": "gone"}}))
    asked = model()
    result = drive(asked, tools(changed), "task", Budgets(), journal)
    assert result.stop_reason is StopReason.TOOLS_CHANGED
    assert result.error == (
        "the tools' server lists them differently than when the run started "
        "(gone: gone; changed: price)"
    )
    assert asked.calls == 0 and journal.entries == []
    assert journal.stop is not None and journal.stop.reason is StopReason.TOOLS_CHANGED
    assert "lists them differently" in StopReason.TOOLS_CHANGED.meaning


def test_a_journal_begun_without_listings_gets_none_in_its_middle() -> None:
    prior = [
        Entry(EntryKind.TASK, 0, Counters(), content="task"),
        Entry(
            EntryKind.ACTION, 1, Counters(steps=1), tool="plain", args={"object": "x"},
            idempotency_key="r-1",
        ),
    ]  # fmt: skip
    journal = Resumed(prior=prior)
    drive(
        ScriptedModel([call("plain", object="x"), final("ok")]), tools(), "task", Budgets(), journal
    )
    assert EntryKind.TOOLS not in [e.kind for e in journal.entries]


# A framework's own loop (runner.core.foreign): the glue hands over the listings its MCP
# client got, before the first model request.


def foreign(journal: MemoryJournal) -> ForeignRun:
    run = ForeignRun({}, "task", Budgets(), journal)
    run.begin()
    return run


def test_a_frameworks_listings_are_journaled_once_after_the_task() -> None:
    journal = MemoryJournal()
    run = foreign(journal)
    run.listed({"price": LISTING})
    run.listed({"price": {**LISTING, "name": "other"}})  # later lists: not the run's start
    assert [(e.kind, e.args) for e in journal.entries] == [
        (EntryKind.TASK, None),
        (EntryKind.TOOLS, {"price": LISTING}),
    ]


def test_a_frameworks_resume_goes_on_with_the_same_listings_and_stops_on_changed_ones() -> None:
    foreign(Resumed(prior=started({"price": LISTING}))).listed({"price": LISTING})
    changed = Resumed(prior=started({"price": LISTING}))
    with pytest.raises(Stopped) as stopped:
        foreign(changed).listed({"price": LISTING, "stock": LISTING})
    assert stopped.value.stop.reason is StopReason.TOOLS_CHANGED
    assert "new: stock" in str(stopped.value.stop.error)
    assert changed.stop is not None and changed.stop.reason is StopReason.TOOLS_CHANGED
