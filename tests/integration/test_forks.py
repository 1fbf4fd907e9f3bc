"""Forks, on SQLite and PostgreSQL: a new run from a copy of another's first steps, the
parent untouched, the copied calls never run again, the fork's calls under keys of its own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from runner import CannotFork, RunConflict, Runner
from runner.core.agent import load_agent
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.sql.schema import entries, runs

from .ledgered_steps import (
    CALLS_BY_STEP,
    LedgeredSteps,
    complete_steps,
    copy_end,
    run_to_the_end,
)
from .operating_agents import ref
from .support import died_with, observation, tool_action


def ledgers() -> tuple[list[int], list[str]]:
    """The loaded agents file's own lists of model calls and `add` calls."""
    module: dict[str, Any] = load_agent(ref("counter")).model.__globals__
    model_calls, tool_calls = module["MODEL_CALLS"], module["TOOL_CALLS"]
    model_calls.clear()
    tool_calls.clear()
    return model_calls, tool_calls


def rows(runner: Runner, table: Any, *where: Any) -> list[dict[str, Any]]:
    with runner.engine.connect() as connection:
        query = select(table).where(*where)
        if table is entries:
            query = query.order_by(entries.c.seq)
        return [dict(row._mapping) for row in connection.execute(query)]


def test_a_fork_copies_the_first_steps_and_goes_on_with_keys_of_its_own(db_url: str) -> None:
    model_calls, tool_calls = ledgers()
    with Runner(db_url) as runner:
        parent = runner.run(ref("counter"), "count", id="parent")
        assert (parent.output, parent.steps) == ("3", 4)
        parent_row = rows(runner, runs, runs.c.id == "parent")
        parent_entries = rows(runner, entries, entries.c.run_id == "parent")
        del model_calls[:], tool_calls[:]

        forked = runner.fork("parent", 2, id="child")
        queued = runner.row(forked)
        fork_of = (queued.forked_from_id, queued.forked_at_step)
        assert (queued.status, fork_of) == ("queued", ("parent", 2))
        assert (queued.agent, queued.task, queued.budgets) == (
            parent_row[0]["agent"], "count", parent_row[0]["budgets"],
        )  # fmt: skip
        result = runner.resume(forked)
        child = rows(runner, entries, entries.c.run_id == "child")
        # The parent, row and journal, is exactly as it was.
        assert rows(runner, runs, runs.c.id == "parent") == parent_row
        assert rows(runner, entries, entries.c.run_id == "parent") == parent_entries
    assert (result.stop_reason, result.output, result.steps) == ("final", "3", 4)
    assert result.transcript == parent.transcript
    assert model_calls == [3, 4]  # steps 1 and 2 came from the copy
    assert tool_calls == ["child-3"]  # the copied calls never ran again
    copied = child[:5]  # task, then two steps of action and observation
    for mine, theirs in zip(copied, parent_entries[:5], strict=True):
        assert mine == {**theirs, "run_id": "child", "lease_epoch": 0}
    assert [e["idempotency_key"] for e in child if e["kind"] == "action"] == [
        "parent-1", "parent-2", "child-3",
    ]  # fmt: skip
    assert all(e["lease_epoch"] >= 1 for e in child[5:])


def test_a_fork_with_other_budgets_records_the_change_after_the_copy(db_url: str) -> None:
    with Runner(db_url) as runner:
        assert runner.run(ref("counter"), "count", id="short", max_steps=2).stop_reason == (
            "max_steps"
        )
        with pytest.raises(CannotFork, match="max_steps 2 leaves no step: the run has taken 2"):
            runner.fork("short", 2)  # it would stop where its parent did
        forked = runner.fork("short", 2, max_steps=5)
        result = runner.resume(forked)
        journal = runner.journal(forked)
        parent = runner.row("short")
    assert (result.stop_reason, result.output) == ("final", "3")
    assert [e.kind for e in journal][:6] == [
        "task", "action", "observation", "action", "observation", "extended",
    ]  # fmt: skip
    assert journal[5].args == {
        "budgets": {"max_steps": [2, 5]}, "forked_from": "short", "at_step": 2,
    }  # fmt: skip
    assert (parent.status, parent.stop_reason) == ("finished", "max_steps")


def test_a_fork_of_a_revived_run_replays_its_revival(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(ref("counter"), "count", id="p", max_steps=1)
        assert runner.resume("p", max_steps=8).output == "3"
        # Step 2 came after the revival: the copy holds it, and the fork's budgets are the
        # parent's now, so no change is recorded after the copy.
        forked = runner.fork("p", 2)
        result = runner.resume(forked)
        kinds = [e.kind for e in runner.journal(forked)]
    assert (result.output, result.steps) == ("3", 4)
    assert kinds == ["task", "action", "observation", "revived", "action", "observation",
                     "action", "observation", "final"]  # fmt: skip


def test_a_fork_of_an_unfinished_run(db_url: str) -> None:
    model_calls, tool_calls = ledgers()
    with Runner(db_url) as runner:
        first = tool_action("crashed", 1, "add", {"a": 0, "b": 1}, Counters())
        second = tool_action("crashed", 2, "add", {"a": 1, "b": 1}, first.counters)
        died_with(
            runner.engine, "crashed", "count", [first, observation(first, "1"), second],
            agent=ref("counter"),
        )  # fmt: skip
        with pytest.raises(CannotFork, match="step 2 of run crashed is a tool call with no result"):
            runner.fork("crashed", 2)
        result = runner.resume(runner.fork("crashed", 1, id="branch"))
        parent = runner.row("crashed")
    assert (result.output, result.steps) == ("3", 4)
    assert model_calls == [2, 3, 4] and tool_calls == ["branch-2", "branch-3"]
    assert (parent.status, parent.steps) == ("running", 2)  # untouched, still to resume


@pytest.mark.parametrize(
    ("at_step", "message"),
    [
        (4, "step 4 of run done is its final answer: fork at a step whose tool calls have "
            "their results \\(0 to 3\\)"),
        (9, "run done has no step 9"),
        (-1, "--at-step must be 0 or more"),
    ],
)  # fmt: skip
def test_a_fork_needs_a_step_with_its_result(db_url: str, at_step: int, message: str) -> None:
    with Runner(db_url) as runner:
        runner.run(ref("counter"), "count", id="done")
        with pytest.raises(CannotFork, match=message):
            runner.fork("done", at_step)
        assert [r.id for r in runner.list()] == ["done"]


def test_a_fork_at_step_0_asks_again_from_the_task(db_url: str) -> None:
    model_calls, _ = ledgers()
    with Runner(db_url) as runner:
        runner.run(ref("counter"), "count", id="p")
        del model_calls[:]
        result = runner.resume(runner.fork("p", 0))
    assert model_calls == [1, 2, 3, 4] and result.output == "3"


def test_a_fork_with_another_agent_and_its_id_as_an_idempotency_key(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(ref("counter"), "count", id="p")
        forked = runner.fork("p", 1, id="f", agent=ref("relabelled"))
        assert runner.fork("p", 1, id="f", agent=ref("relabelled")) == forked  # the same again
        row = runner.row(forked)
        assert (row.agent, row.release) == (ref("relabelled"), "5")
        with pytest.raises(
            RunConflict,
            match="another origin: origin run p at step 1 \\(asked: run p at step 2\\)",
        ):
            runner.fork("p", 2, id="f", agent=ref("relabelled"))
        with pytest.raises(RunConflict, match="another agent"):
            runner.fork("p", 1, id="f")
        assert runner.resume(forked).output == "3"


def test_a_fork_is_whole_or_absent(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(ref("counter"), "count", id="p")
        runner.submit(ref("counter"), "taken", id="taken")
        with pytest.raises(RunConflict):
            runner.fork("p", 2, id="taken")  # the id names another run: nothing copied
        assert rows(runner, entries, entries.c.run_id == "taken") == []
        assert runner.row("taken").forked_from_id is None


# -- steps of several calls, approvals, and every boundary inside a step ---------------------


def test_a_fork_at_any_step_copies_it_whole_and_runs_none_of_its_calls_again(
    db_url: str, tmp_path: Path
) -> None:
    """Issue 29: a fork at a step of several calls copied it only up to its first result, so
    the fork settled the other calls again (OutcomeUnknown for a plain tool, a second run of
    an idempotent one under its parent's key)."""
    steps = LedgeredSteps(tmp_path / "ledger")
    with Runner(db_url) as runner:
        parent = run_to_the_end(runner, steps.agent, "p", "shop")
        journal = runner.journal("p")
        parent_rows = rows(runner, entries, entries.c.run_id == "p")
        assert steps.calls() == sorted(set(steps.calls()), key=steps.calls().index)  # once each
        for at_step in range(4):
            before = len(steps.calls())
            forked = runner.fork("p", at_step, id=f"f{at_step}")
            result = run_to_the_end(runner, steps.agent, forked, None)
            child = rows(runner, entries, entries.c.run_id == forked)
            ran = steps.calls()[before:]
            copied = copy_end(journal, at_step)
            assert (result.stop_reason, result.output) == ("final", parent.output), at_step
            assert result.transcript == parent.transcript
            for mine, theirs in zip(child[:copied], parent_rows[:copied], strict=True):
                assert mine == {**theirs, "run_id": forked, "lease_epoch": 0}
            # Past the copy, only the fork's own steps, under its own keys: each call once.
            assert all(e["step"] > at_step for e in child[copied:])
            assert all(key.startswith(f"{forked}-") for key in ran), (at_step, ran)
            assert (
                len(ran)
                == len(set(ran))
                == sum(n for step, n in CALLS_BY_STEP.items() if step > at_step)
            )
            assert not [e for e in child if str(e["content"]).startswith("OutcomeUnknown")]
        assert rows(runner, entries, entries.c.run_id == "p") == parent_rows  # untouched


def test_a_fork_of_a_run_cut_at_every_boundary_inside_a_step(db_url: str, tmp_path: Path) -> None:
    """A run whose worker died anywhere inside a step: a fork at each of its steps whose calls
    all have their results copies them whole and runs nothing of the parent's again; a fork at
    a step with a call still waiting or still running is refused, and nothing is written."""
    steps = LedgeredSteps(tmp_path / "ledger")
    with Runner(db_url) as runner:
        parent = run_to_the_end(runner, steps.agent, "p", "shop")
        journal = runner.journal("p")
        parent_keys = set(steps.calls())
        # Every cut but the whole: the answer is written with the run's stop, in one commit.
        for cut in range(2, len(journal)):
            cut_id = f"cut{cut}"
            died_with(runner.engine, cut_id, "shop", journal[1:cut])
            complete = complete_steps(journal[:cut])
            for at_step in {e.step for e in journal[1:cut]} - complete:
                with pytest.raises(CannotFork, match=f"step {at_step} of run {cut_id} "):
                    runner.fork(cut_id, at_step, id=f"{cut_id}-no")
            assert [r.id for r in runner.list() if r.id == f"{cut_id}-no"] == []
            at_step = max(complete, default=0)
            before = len(steps.calls())
            forked = runner.fork(cut_id, at_step, id=f"{cut_id}-at{at_step}")
            copied = copy_end(journal, at_step)
            assert [e.idempotency_key for e in runner.journal(forked)[:copied]] == [
                e.idempotency_key for e in journal[:copied]
            ]
            result = run_to_the_end(runner, steps.agent, forked, None)
            ran = steps.calls()[before:]
            assert (result.stop_reason, result.output) == ("final", parent.output), cut
            assert not parent_keys & set(ran), (cut, ran)  # no call of the parent's again
            assert all(key.startswith(f"{forked}-") for key in ran), (cut, ran)
            assert len(ran) == len(set(ran))


def test_a_fork_at_a_step_with_calls_still_running_or_waiting_is_refused(db_url: str) -> None:
    with Runner(db_url) as runner:
        first = tool_action("two", 1, "note", {"text": "a"}, Counters())
        second = replace(first, tool="keyed", args={"n": 1}, idempotency_key="two-1.2")
        first = replace(first, idempotency_key="two-1.1")
        died_with(runner.engine, "two", "shop", [first, second, observation(second, "keyed 1")])
        with pytest.raises(
            CannotFork,
            match="step 1 of run two is 2 tool calls, 1 of them with no result yet: fork at a "
            "step whose tool calls have their results \\(0 to 1\\)",
        ):
            runner.fork("two", 1)
        call = tool_action("asks", 1, "refund", {"amount": 250}, Counters())
        wait = Entry(
            EntryKind.WAIT, 1, call.counters, content="refund 250?", tool="refund",
            idempotency_key=call.idempotency_key, waits_for="approval",
        )  # fmt: skip
        died_with(runner.engine, "asks", "shop", [call, wait])
        with pytest.raises(CannotFork, match="step 1 of run asks is a call that waits for a"):
            runner.fork("asks", 1)
        assert sorted(r.id for r in runner.list()) == ["asks", "two"]
