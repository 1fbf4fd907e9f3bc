"""Revival, extension and forks on the in-memory store: the decisions of
runner.service.revival and fork, on the store's rows. The SQL of the copy and the crash
paths stay in tests/integration (test_revival.py, test_forks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from runner import Agent, CannotContinue, CannotFork, RunConflict, run_agent
from runner.core.budgets import Budgets
from runner.core.journal import EntryKind
from runner.testing import FunctionModel, call, final, tool_results

from .store_support import memory_runner

Transcript = list[dict[str, Any]]


def counting(answer_after: int) -> FunctionModel:
    """search(1), search(2), ... then the answer after `answer_after` results."""

    def move(transcript: Transcript) -> dict[str, Any]:
        seen = len(tool_results(transcript))
        if seen >= answer_after:
            return {"type": "final", "content": f"found {seen}", "usage": 10}
        return {**call("search", q=seen + 1), "usage": 10}

    return FunctionModel(move)


def search(q: int) -> str:
    return f"result {q}"


TOOLS = {"search": search}


@pytest.mark.parametrize(
    ("first", "revive", "stop", "steps"),
    [
        ({"max_steps": 2}, {"max_steps": 6}, "max_steps", 2),
        ({"max_tokens": 25}, {"max_tokens": 100}, "token_budget", 3),
    ],
)
def test_a_run_stopped_by_a_budget_goes_on_with_a_larger_one(
    first: dict[str, Any], revive: dict[str, Any], stop: str, steps: int
) -> None:
    runner, store, _ = memory_runner()
    stopped = runner.run(Agent(counting(4), TOOLS), "t", id="r", **first)
    assert (stopped.stop_reason, stopped.steps) == (stop, steps)
    before = list(store.entries["r"])
    revived = runner.revive("r", **revive)
    assert (revived.status, revived.stop_reason, revived.finished_at) == ("queued", None, None)
    assert revived.budgets == Budgets(**{**first, **revive}).as_dict()
    again = counting(4)
    result = runner.resume("r", agent=Agent(again, TOOLS))
    assert (result.stop_reason, result.output) == ("final", "found 4")
    assert store.entries["r"][: len(before)] == before  # nothing recorded was rewritten
    journal = runner.journal("r")
    (mark,) = [e for e in journal if e.kind is EntryKind.REVIVED]
    assert mark.args is not None and mark.args["stop_reason"] == stop
    assert journal.index(mark) == len(before)
    assert again.calls == result.steps - steps  # only the steps not recorded
    if stop == "max_steps":
        whole = run_agent(counting(4), TOOLS, "t", **{**first, **revive})
        assert result.transcript == whole.transcript


def test_a_time_budget_counts_from_the_revival() -> None:
    runner, _, clock = memory_runner()
    stopped = runner.run(Agent(counting(2), TOOLS), "t", id="late", max_seconds=0)
    assert (stopped.stop_reason, stopped.steps) == ("time_budget", 0)
    with pytest.raises(CannotContinue, match="give --max-seconds"):
        runner.revive("late", max_steps=9)
    clock.advance(3600)
    result = runner.resume("late", agent=Agent(counting(2), TOOLS), max_seconds=60)
    deadline = runner.row("late").deadline
    assert (result.stop_reason, result.steps) == ("final", 3)
    assert deadline is not None and deadline.timestamp() == pytest.approx(clock.time() + 60)


def test_refused_revivals_write_nothing() -> None:
    runner, store, _ = memory_runner()
    runner.run(Agent(counting(4), TOOLS), "t", id="r", max_steps=2)
    runner.run(Agent(counting(0), TOOLS), "t", id="done")
    before = (runner.row("r"), list(store.entries["r"]))
    with pytest.raises(CannotContinue, match="max_steps 2 leaves no step"):
        runner.revive("r", max_steps=2)
    with pytest.raises(CannotContinue, match="answered \\(final\\): there is nothing"):
        runner.revive("done", max_steps=9)
    runner.submit(Agent(counting(1), TOOLS, ref="x:y"), "t", id="c")
    runner.cancel("c")
    with pytest.raises(CannotContinue, match="was cancelled on request: fork it"):
        runner.revive("c", max_steps=9)
    assert (runner.row("r"), store.entries["r"]) == before


def test_new_budgets_for_an_unfinished_run_are_journaled_then_used() -> None:
    runner, store, _ = memory_runner()
    agent = Agent(counting(4), TOOLS, ref="x:y")
    runner.submit(agent, "t", id="u", max_steps=2)
    with pytest.raises(CannotContinue, match="max_steps 0 leaves no step"):
        runner.resume("u", agent=agent, max_steps=0)
    assert runner.row("u").status == "queued"  # given back, not stuck with us
    result = runner.resume("u", agent=agent, max_steps=9)
    assert (result.stop_reason, result.output, result.steps) == ("final", "found 4", 5)
    (mark,) = [e for e in runner.journal("u") if e.kind is EntryKind.EXTENDED]
    assert mark.args == {"budgets": {"max_steps": [2, 9]}}
    assert store.runs["u"]["budgets"]["max_steps"] == 9


def test_the_original_request_still_names_a_revived_run() -> None:
    runner, _, _ = memory_runner()
    agent = Agent(counting(4), TOOLS, name="c")
    assert runner.run(agent, "t", id="r", max_steps=2).stop_reason == "max_steps"
    runner.resume("r", agent=agent, max_steps=6)
    assert runner.run(agent, "t", id="r", max_steps=2).output == "found 4"  # as created
    assert runner.run(agent, "t", id="r", max_steps=6).output == "found 4"  # as now
    with pytest.raises(RunConflict, match="max_steps 2 \\(asked: 3\\)"):
        runner.run(agent, "t", id="r", max_steps=3)


# -- forks ---------------------------------------------------------------------------------------


def adding() -> FunctionModel:
    """add(n, 1) three times, then the answer: 4 steps."""
    return FunctionModel(
        lambda t: (
            final(tool_results(t)[-1]["content"])
            if len(tool_results(t)) >= 3
            else call("add", a=len(tool_results(t)), b=1)
        )
    )


def test_a_fork_copies_the_first_steps_and_goes_on_with_keys_of_its_own() -> None:
    keys: list[str] = []

    def add(a: int, b: int, idempotency_key: str) -> int:
        keys.append(idempotency_key)
        return a + b

    runner, store, _ = memory_runner()
    parent = runner.run(Agent(adding(), {"add": add}), "count", id="parent")
    assert (parent.output, parent.steps) == ("3", 4)
    parent_entries = [dict(row) for row in store.entries["parent"]]
    del keys[:]
    forked = runner.fork("parent", 2, id="child")
    queued = runner.row(forked)
    fork_of = (queued.forked_from_id, queued.forked_at_step)
    assert (queued.status, fork_of) == ("queued", ("parent", 2))
    model = adding()
    result = runner.resume(forked, agent=Agent(model, {"add": add}))
    assert (result.output, result.transcript) == ("3", parent.transcript)
    assert model.calls == 2 and keys == ["child-3"]  # the copied calls never ran again
    assert store.entries["parent"] == parent_entries  # the parent is only read
    for mine, theirs in zip(store.entries["child"][:5], parent_entries[:5], strict=True):
        assert mine == {**theirs, "run_id": "child", "lease_epoch": 0}


def test_a_fork_with_other_budgets_records_the_change_after_the_copy() -> None:
    runner, _, _ = memory_runner()
    agent = Agent(adding(), {"add": lambda a, b: a + b})
    assert runner.run(agent, "count", id="short", max_steps=2).stop_reason == "max_steps"
    with pytest.raises(CannotFork, match="max_steps 2 leaves no step: the run has taken 2"):
        runner.fork("short", 2)
    forked = runner.fork("short", 2, max_steps=5)
    assert runner.resume(forked, agent=agent).output == "3"
    journal = runner.journal(forked)
    assert journal[5].kind == "extended"
    assert journal[5].args == {
        "budgets": {"max_steps": [2, 5]},
        "forked_from": "short",
        "at_step": 2,
    }


def test_a_fork_needs_a_step_with_its_result_and_its_id_names_one_request() -> None:
    runner, _, _ = memory_runner()
    agent = Agent(adding(), {"add": lambda a, b: a + b}, ref="x:counter")
    runner.run(agent, "count", id="done")
    with pytest.raises(CannotFork, match="step 4 of run done is its final answer"):
        runner.fork("done", 4)
    with pytest.raises(CannotFork, match="run done has no step 9"):
        runner.fork("done", 9)
    assert runner.fork("done", 1, id="f") == runner.fork("done", 1, id="f")
    with pytest.raises(RunConflict, match="another origin: origin run"):
        runner.fork("done", 2, id="f")
    runner.submit(agent, "taken", id="taken")
    with pytest.raises(RunConflict):
        runner.fork("done", 2, id="taken")  # the id names another run: nothing copied
    assert runner.journal("taken") == [] and runner.row("taken").forked_from_id is None
