"""Revive and extend, on SQLite and PostgreSQL: a stopped run goes on from its journal with
new budgets, the change and the earlier stop journaled; an unfinished one is extended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import select

from runner import Agent, CannotContinue, RunConflict, Runner, current_call, run_agent, tool
from runner.core.budgets import Budgets
from runner.core.clock import ManualClock
from runner.core.counters import Counters
from runner.core.journal import EntryKind
from runner.core.status import RunStatus
from runner.history import History
from runner.sql.schema import runs
from runner.testing import FunctionModel

from .support import Crash, crash, died_with, entry_rows, observation, tool_action

Transcript = list[dict[str, Any]]


def counting_model(answer_after: int, usage: Any = 10) -> FunctionModel:
    """search(1), search(2), ... then the answer after `answer_after` results."""

    def model(transcript: Transcript) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        if len(seen) >= answer_after:
            return {"type": "final", "content": f"found {len(seen)}", "usage": usage}
        return {"type": "tool", "name": "search", "args": {"q": len(seen) + 1}, "usage": usage}

    return FunctionModel(model)


@tool(idempotent=True)
def search(q: int) -> str:
    return f"result {q}"


def repeater(transcript: Transcript) -> dict[str, Any]:
    """The same call three times, then the answer."""
    seen = [m for m in transcript if m["role"] == "tool"]
    if len(seen) >= 3:
        return {"type": "final", "content": "looked thrice"}
    return {"type": "tool", "name": "search", "args": {"q": 1}}


def failing_then_answers(transcript: Transcript) -> dict[str, Any]:
    seen = [m for m in transcript if m["role"] == "tool"]
    if len(seen) >= 3:
        return {"type": "final", "content": "gave up on it"}
    return {"type": "tool", "name": "broken", "args": {"n": len(seen)}}


def broken(n: int) -> str:
    raise ValueError(f"broken {n}")


@dataclass(frozen=True)
class Case:
    stop: str
    model: Any
    first: dict[str, Any]  # budgets the run starts with
    revive: dict[str, Any]  # what the revival changes
    steps_before: int  # steps when it stopped
    output: str


CASES = [
    Case("max_steps", lambda: counting_model(4), {"max_steps": 2}, {"max_steps": 6}, 2, "found 4"),
    Case("token_budget", lambda: counting_model(4), {"max_tokens": 25}, {"max_tokens": 100}, 3,
         "found 4"),
    Case("cost_budget", lambda: counting_model(4, {"tokens": 1, "cost": 1.0}), {"max_cost": 2.5},
         {"max_cost": 10.0}, 3, "found 4"),
    Case("repeated_call", lambda: repeater, {"max_repeats": 1}, {"max_repeats": 5}, 2,
         "looked thrice"),
    Case("tool_errors", lambda: failing_then_answers, {"max_consecutive_errors": 2},
         {"max_consecutive_errors": 3}, 3, "gave up on it"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.stop for c in CASES])
def test_a_run_stopped_by_a_budget_goes_on_with_a_larger_one(db_url: str, case: Case) -> None:
    tools = {"search": search, "broken": broken}
    first = case.model()
    with Runner(db_url) as runner:
        stopped = runner.run(Agent(first, tools), "t", id="r", **case.first)
        assert (stopped.stop_reason, stopped.steps) == (case.stop, case.steps_before)
        before = entry_rows(runner.engine, "r")
        revived = runner.revive("r", **case.revive)
        assert (revived.status, revived.stop_reason, revived.finished_at) == ("queued", None, None)
        assert revived.budgets == Budgets(**{**case.first, **case.revive}).as_dict()
        again = case.model()
        result = runner.resume("r", agent=Agent(again, tools))
        rows = entry_rows(runner.engine, "r")
        journal = runner.journal("r")
        with History(db_url) as history:
            stats = history.stats(by="agent")
    assert (result.stop_reason, result.output) == ("final", case.output)
    assert rows[: len(before)] == before  # nothing recorded was rewritten
    (mark,) = [e for e in journal if e.kind is EntryKind.REVIVED]
    name, value = next(iter(case.revive.items()))
    assert mark.args == {
        "budgets": {name: [Budgets(**case.first).as_dict()[name], value]},
        "stop_reason": case.stop,
        "error": None,
        "finished_at": mark.args["finished_at"],
    }
    assert mark.args["finished_at"] is not None
    assert mark.content.startswith(f"revived after {case.stop}: {name} ")
    assert journal.index(mark) == len(before)
    assert journal[len(before) + 1].step == mark.step + 1  # on from the next step
    # The model was asked only for the steps that were not recorded.
    assert getattr(again, "calls", None) in (None, result.steps - case.steps_before)
    # The transcript is the one a run with the larger budget would have had, minus the step
    # a stop rule refused (never run, never shown).
    uninterrupted = run_agent(case.model(), tools, "t", **{**case.first, **case.revive})
    if case.stop in ("max_steps", "tool_errors"):
        assert result.transcript == uninterrupted.transcript
    # Stats count the run once, by its last stop.
    (group,) = stats
    assert [(s.stop_reason, s.count) for s in group.shares] == [("final", 1)]


def test_a_time_budget_counts_from_the_revival(db_url: str) -> None:
    clock = ManualClock()
    model = counting_model(2)
    with Runner(db_url, clock=clock) as runner:
        stopped = runner.run(Agent(model, {"search": search}), "t", id="late", max_seconds=0)
        assert (stopped.stop_reason, stopped.steps) == ("time_budget", 0)
        with pytest.raises(CannotContinue, match="give --max-seconds"):
            runner.revive("late", max_steps=9)
        clock.advance(3600)  # an hour later: the budget is measured from the revival
        result = runner.resume("late", agent=Agent(model, {"search": search}), max_seconds=60)
        row = runner.row("late")
    assert (result.stop_reason, result.steps) == ("final", 3)
    assert row.deadline is not None and row.deadline.timestamp() == pytest.approx(clock.time() + 60)


def test_a_crash_loop_is_revived_and_its_count_of_takeovers_starts_again(db_url: str) -> None:
    kills = [2]  # the first two attempts kill their worker

    @tool(idempotent=True)
    def flaky() -> str:
        call = current_call()
        assert call is not None
        if kills[0]:
            kills[0] -= 1
            raise Crash
        return f"worked on attempt {call.attempt}"

    def model(transcript: Transcript) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        if seen:
            return {"type": "final", "content": seen[-1]["content"]}
        return {"type": "tool", "name": "flaky", "args": {}}

    agent = Agent(model, {"flaky": flaky})
    with Runner(db_url, max_resumes=0) as runner:
        action = tool_action("loop", 1, "flaky", {}, Counters())
        died_with(runner.engine, "loop", "t", [action])
        with pytest.raises(Crash):
            runner.resume("loop", agent=agent)  # took over after progress: not stalled
        crash(runner.engine, "loop")
        stopped = runner.resume("loop", agent=agent)  # no entry since: crash_loop
        assert stopped.stop_reason == "crash_loop"
        assert stopped.error is not None and "resumed 1 times in a row" in stopped.error
        # Plain resume only reports the stop; revive=True (or `--max-resumes`) goes on.
        assert runner.resume("loop", agent=agent).stop_reason == "crash_loop"
        with pytest.raises(Crash):
            runner.resume("loop", agent=agent, revive=True)
        crash(runner.engine, "loop")
        # The revival forgave the earlier takeovers, but this one counts: crash_loop again.
        assert runner.resume("loop", agent=agent).stop_reason == "crash_loop"
    with Runner(db_url, max_resumes=3) as patient:
        result = patient.resume("loop", agent=agent, revive=True)
        journal = patient.journal("loop")
    assert (result.stop_reason, result.output) == ("final", "worked on attempt 6")
    revivals = [e for e in journal if e.kind is EntryKind.REVIVED]
    assert [e.args["stop_reason"] for e in revivals] == ["crash_loop", "crash_loop"]
    assert all(e.args["budgets"] == {} for e in revivals)
    assert all("resumed 1 times" in e.args["error"] for e in revivals)
    assert [e.kind for e in journal] == [
        "task", "action", "revived", "revived", "observation", "final",
    ]  # fmt: skip


def test_the_original_request_still_names_a_revived_run(db_url: str) -> None:
    agent = Agent(counting_model(4), {"search": search}, name="c")
    with Runner(db_url) as runner:
        assert runner.run(agent, "t", id="r", max_steps=2).stop_reason == "max_steps"
        runner.resume("r", agent=agent, max_steps=6)
        assert runner.run(agent, "t", id="r", max_steps=2).output == "found 4"  # as created
        assert runner.run(agent, "t", id="r", max_steps=6).output == "found 4"  # as now
        with pytest.raises(RunConflict, match="max_steps 2 \\(asked: 3\\)"):
            runner.run(agent, "t", id="r", max_steps=3)


REFUSALS = [
    ("final", {}, {"max_steps": 9}, "answered \\(final\\): there is nothing to continue"),
    ("max_steps", {"max_steps": 2}, {"max_steps": 2}, "max_steps 2 leaves no step"),
    ("max_steps", {"max_steps": 2}, {"max_tokens": 99999}, "max_steps 2 leaves no step"),
    ("repeated_call", {"max_repeats": 1}, {"max_steps": 20}, "does not raise the limit"),
    ("token_budget", {"max_tokens": 25}, {"max_tokens": 29}, "max_tokens 29 is below the 30"),
]


@pytest.mark.parametrize(("stop", "first", "asked", "message"), REFUSALS)
def test_a_revival_that_would_not_go_on_is_refused(
    db_url: str, stop: str, first: dict[str, Any], asked: dict[str, Any], message: str
) -> None:
    model = repeater if stop == "repeated_call" else counting_model(4)
    with Runner(db_url) as runner:
        assert runner.run(Agent(model, {"search": search}), "t", id="r", **first).stop_reason == (
            stop
        )
        before = (runner.row("r"), entry_rows(runner.engine, "r"))
        with pytest.raises(CannotContinue, match=message):
            runner.revive("r", **asked)
        with pytest.raises(CannotContinue, match=message):
            runner.resume("r", agent=Agent(model, {"search": search}), **asked)
        assert (runner.row("r"), entry_rows(runner.engine, "r")) == before


def test_cancelled_model_error_and_wrapped_up_runs_are_not_revived(db_url: str) -> None:
    def fails(transcript: Transcript) -> Any:
        raise RuntimeError("down")

    def wraps(transcript: Transcript) -> dict[str, Any]:
        if "budget is spent" in str(transcript[-1]["content"]):
            return {"type": "final", "content": "best guess"}
        return {"type": "tool", "name": "search", "args": {"q": len(transcript)}}

    with Runner(db_url) as runner:
        runner.submit(Agent(counting_model(1), {"search": search}, ref="x:y"), "t", id="c")
        runner.cancel("c")
        runner.run(Agent(fails), "t", id="m", model_retries=0, retry_backoff=0)
        runner.run(Agent(wraps, {"search": search}), "t", id="w", max_steps=1, wrap_up=True)
        for run_id, message in [
            ("c", "was cancelled on request: fork it"),
            ("m", "stopped with model_error, which new budgets do not lift"),
            ("w", "ended with a wrap-up call after max_steps"),
        ]:
            with pytest.raises(CannotContinue, match=message):
                runner.revive(run_id, max_steps=9)


def test_new_budgets_for_an_unfinished_run_are_journaled_then_used(db_url: str) -> None:
    model = counting_model(4)
    with Runner(db_url) as runner:
        first = tool_action("u", 1, "search", {"q": 1}, Counters())
        died_with(runner.engine, "u", "t", [first, observation(first, "result 1")], Budgets(
            max_steps=2
        ))  # fmt: skip
        with pytest.raises(CannotContinue, match="max_steps 1 leaves no step"):
            runner.resume("u", agent=Agent(model, {"search": search}), max_steps=1)
        assert runner.row("u").status == RunStatus.QUEUED  # given back, not stuck with us
        result = runner.resume("u", agent=Agent(model, {"search": search}), max_steps=9)
        journal = runner.journal("u")
        with runner.engine.connect() as connection:
            budgets = connection.execute(select(runs.c.budgets).where(runs.c.id == "u")).scalar()
    assert (result.stop_reason, result.output, result.steps) == ("final", "found 4", 5)
    assert model.calls == 4  # step 1 came from the journal
    (mark,) = [e for e in journal if e.kind is EntryKind.EXTENDED]
    assert mark.args == {"budgets": {"max_steps": [2, 9]}}
    assert mark.content == "budgets changed: max_steps 2 -> 9"
    assert budgets["max_steps"] == 9
