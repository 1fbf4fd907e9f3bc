"""Durable runs through `Runner` on SQLite and PostgreSQL: the same results as `run_agent`,
stored results, ids and prefixes, cancellation, and budgets that survive a resume."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from runner import (
    Agent,
    AgentLoadError,
    AmbiguousRunId,
    RunConflict,
    Runner,
    RunNotFound,
    StopReason,
    run_agent,
)
from runner.core.agent import load_agent
from runner.core.budgets import Budgets
from runner.core.clock import ManualClock
from runner.core.counters import Counters
from runner.core.journal import EntryKind
from runner.core.status import RunStatus
from runner.sql import leases
from runner.testing import FunctionModel

from .agents import SOLVER_REF
from .support import (
    TOOLS,
    Crash,
    Transcript,
    count_entries,
    count_runs,
    crash,
    crashes_on_call,
    died_with,
    failing_division,
    fields,
    malformed_then_json,
    observation,
    observations,
    recovers,
    same_search,
    solver,
    tool_action,
    wander,
    wraps_up,
)

# -- the same results as run_agent ------------------------------------------------------------


async def async_solver(transcript: Transcript) -> dict[str, Any]:
    return solver(transcript)


async def async_add(a: float, b: float) -> float:
    return a + b


def always_raises(transcript: Transcript) -> Any:
    raise ValueError(f"no model today ({len(transcript)} messages)")


@dataclass(frozen=True)
class Case:
    model: Callable[[Transcript], Any]
    task: str
    budgets: dict[str, Any] = field(default_factory=dict)
    reason: StopReason = StopReason.FINAL
    tools: dict[str, Callable[..., Any]] = field(default_factory=lambda: dict(TOOLS))


CASES = {
    "seed_solver": Case(solver, "2+3?"),
    "tool_errors": Case(failing_division, "fail", reason=StopReason.TOOL_ERRORS),
    "repeated_call": Case(same_search, "loop", reason=StopReason.REPEATED_CALL),
    "token_budget": Case(wander(4000), "spend", reason=StopReason.TOKEN_BUDGET),
    "max_steps": Case(wander(), "wander", {"max_steps": 5}, StopReason.MAX_STEPS),
    "recovers": Case(recovers, "recover"),
    "malformed_output": Case(malformed_then_json, "malformed"),
    "wrap_up": Case(wraps_up, "wrap", {"max_steps": 2, "wrap_up": True}, StopReason.MAX_STEPS),
    "cost_budget": Case(
        wander({"tokens": 1, "cost": 0.4}), "cost", {"max_cost": 1.0}, StopReason.COST_BUDGET
    ),
    "async_model_and_tool": Case(async_solver, "2+3?", tools={"add": async_add}),
    "model_error": Case(
        always_raises,
        "broken",
        {"model_retries": 1, "retry_backoff": 0.0},
        StopReason.MODEL_ERROR,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_durable_run_equals_run_agent(db_url: str, name: str) -> None:
    case = CASES[name]
    expected = run_agent(case.model, case.tools, case.task, **case.budgets)
    assert expected.stop_reason == case.reason  # the case tests what its name says

    with Runner(db_url) as runner:
        result = runner.run(Agent(case.model, case.tools), case.task, **case.budgets)
        stored = runner.get(result.run_id or "")
        row = runner.row(result.run_id or "")

    assert fields(result) == fields(expected)
    assert result.status == "finished"
    # What the database holds gives back the same result, transcript and all.
    assert fields(stored) == fields(expected)
    assert stored.run_id == result.run_id
    assert (row.status, row.stop_reason) == ("finished", case.reason)
    assert row.budgets == Budgets(**case.budgets).as_dict()
    assert row.finished_at is not None
    assert (row.lease_owner, row.lease_expires_at) == (None, None)


def test_the_transcript_details_survive_the_database(db_url: str) -> None:
    # Spot checks that the comparison above is not vacuous: these shapes went through SQL.
    with Runner(db_url) as runner:
        result = runner.run(Agent(malformed_then_json, TOOLS), "malformed")
        stored = runner.get(result.run_id or "")
    assert stored.output == {"answer": [1, 2.5], "ok": True}
    assert stored.transcript[1] == {"role": "assistant", "invalid": "'not a dict'"}
    assert stored.transcript[2]["is_error"] is True
    assert stored.transcript[2]["content"].startswith("InvalidAction: model output must be")
    assert stored.transcript[3]["role"] == "assistant" and "invalid" in stored.transcript[3]
    assert (stored.tokens, stored.cost) == (14, 0.5)
    assert stored.steps == 3


@pytest.mark.parametrize(
    "answer", [0, False, None, "null", "", 1.5, "5", {"k": [1, None]}, ["a", {"b": True}]]
)
def test_an_answer_comes_back_from_the_database_as_given(db_url: str, answer: Any) -> None:
    def model(transcript: Transcript) -> dict[str, Any]:
        return {"type": "final", "content": answer}

    with Runner(db_url) as runner:
        result = runner.run(Agent(model), "answer")
        stored = runner.get(result.run_id or "")
    assert stored.output == answer and type(stored.output) is type(answer)
    assert stored.transcript[-1] == {"role": "assistant", "content": answer}
    assert fields(stored) == fields(result)


# -- get() --------------------------------------------------------------------------------------


def test_get_of_a_queued_run(db_url: str) -> None:
    with Runner(db_url) as runner:
        run_id = runner.submit(SOLVER_REF, "2+3?", max_steps=4)
        result = runner.get(run_id)
        row = runner.row(run_id)
    assert result.status == "queued"
    assert (result.stop_reason, result.output, result.steps, result.tokens) == (None, None, 0, 0)
    assert result.transcript == []
    assert result.run_id == run_id
    assert row.agent == SOLVER_REF
    assert (row.agent_name, row.release) == ("solver", "r1")
    assert row.budgets["max_steps"] == 4


def test_get_of_a_run_that_stopped_half_way(db_url: str) -> None:
    with Runner(db_url) as runner:
        first = tool_action("half", 1, "add", {"a": 2, "b": 3}, Counters(), tokens=11)
        died_with(runner.engine, "half", "2+3?", [first, observation(first, "5")])
        result = runner.get("half")
    assert result.status == "running"
    assert result.stop_reason is None and result.output is None
    assert (result.steps, result.tokens) == (1, 11)
    assert result.transcript == [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "tool": "add", "args": {"a": 2, "b": 3}},
        {"role": "tool", "name": "add", "content": "5", "is_error": False},
    ]


def test_get_of_an_unknown_run(db_url: str) -> None:
    with Runner(db_url) as runner, pytest.raises(RunNotFound, match="nope"):
        runner.get("nope")


# -- ids ----------------------------------------------------------------------------------------


def test_an_existing_id_returns_the_stored_result_without_the_model(db_url: str) -> None:
    with Runner(db_url) as runner:
        first_model = FunctionModel(solver)
        first = runner.run(Agent(first_model, TOOLS), "2+3?", id="job-1")
        again_model = FunctionModel(solver)
        again = runner.run(Agent(again_model, TOOLS), "2+3?", id="job-1")
        assert count_runs(runner.engine) == 1
        assert count_entries(runner.engine, "job-1") == 4
    assert first_model.calls == 2
    assert again_model.calls == 0
    assert first.run_id == again.run_id == "job-1"
    assert fields(again) == fields(first)


def test_an_existing_id_with_another_task_or_budgets_is_a_conflict(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(Agent(solver, TOOLS), "2+3?", id="job-1")
        with pytest.raises(RunConflict, match="another task: task '2\\+3\\?'") as raised:
            runner.run(Agent(FunctionModel(solver), TOOLS), "a different task", id="job-1")
        assert raised.value.differences == {"task": ("2+3?", "a different task")}
        with pytest.raises(RunConflict, match="max_steps 8 \\(asked: 3\\)"):
            runner.run(Agent(solver, TOOLS), "2+3?", id="job-1", max_steps=3)
        assert count_runs(runner.engine) == 1
        assert count_entries(runner.engine, "job-1") == 4
        # The same request still names the run.
        assert runner.run(Agent(solver, TOOLS), "2+3?", id="job-1").output == "5"
        # Agents are told apart by reference when both have one, else by name.
        assert runner.submit(SOLVER_REF, "2+3?", id="job-3") == "job-3"
        assert runner.submit(SOLVER_REF, "2+3?", id="job-3") == "job-3"
        with pytest.raises(RunConflict, match=r"another agent: agent '/.*agents\.py:solver_agent'"):
            runner.submit(Agent(solver, TOOLS, name="other", ref="x:y"), "2+3?", id="job-3")
        with pytest.raises(RunConflict, match="another agent: agent 'solver' \\(asked: 'nn'"):
            runner.run(Agent(solver, TOOLS, name="nn"), "2+3?", id="job-3")


def test_run_resumes_an_unfinished_run_with_that_id(db_url: str) -> None:
    with Runner(db_url) as runner:
        first = tool_action("job-2", 1, "add", {"a": 2, "b": 3}, Counters())
        died_with(runner.engine, "job-2", "2+3?", [first, observation(first, "5")])
        model = FunctionModel(solver)
        result = runner.run(Agent(model, TOOLS), "2+3?", id="job-2")
        assert count_runs(runner.engine) == 1
    assert (result.stop_reason, result.output, result.steps) == ("final", "5", 2)
    assert model.calls == 1  # step 1 came from the journal


@pytest.mark.parametrize("bad", ["", "has space", "x" * 33, "-leading", "semi;colon"])
def test_a_bad_id_is_refused_before_anything_is_written(db_url: str, bad: str) -> None:
    with Runner(db_url) as runner:
        with pytest.raises(ValueError, match="run id"):
            runner.run(Agent(solver, TOOLS), "t", id=bad)
        assert count_runs(runner.engine) == 0


def test_prefixes_name_runs(db_url: str) -> None:
    with Runner(db_url) as runner:
        for run_id in ("alpha-1", "alpha-2", "beta-1", "a_1", "ab1", "Case-1", "case-2"):
            runner.submit(SOLVER_REF, "2+3?", id=run_id)
        assert runner.get("bet").run_id == "beta-1"
        assert runner.get("alpha-2").run_id == "alpha-2"
        assert runner.row("alpha-1").id == "alpha-1"
        with pytest.raises(AmbiguousRunId, match="alpha"):
            runner.get("alpha")
        with pytest.raises(RunNotFound):
            runner.get("gamma")
        # LIKE wildcards in a prefix are plain characters: `a_` is not `a` + any character.
        assert runner.get("a_").run_id == "a_1"
        # Ids are case-sensitive, so are their prefixes (SQLite's LIKE is not).
        assert runner.get("case").run_id == "case-2"
        assert runner.get("Case").run_id == "Case-1"
        # resume and cancel take prefixes too.
        assert runner.resume("bet").run_id == "beta-1"
        assert runner.cancel("alpha-2").stop_reason == "cancelled"
        with pytest.raises(AmbiguousRunId):
            runner.cancel("alpha")
        assert runner.get("alpha-1").status == "queued"


def test_an_exact_id_wins_over_longer_ids_it_prefixes(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.submit(SOLVER_REF, "2+3?", id="run")
        runner.submit(SOLVER_REF, "2+3?", id="run-2")
        assert runner.get("run").run_id == "run"


def test_resume_without_an_agent_loads_the_stored_reference(db_url: str) -> None:
    calls: list[int] = load_agent(SOLVER_REF).model.__globals__["MODEL_CALLS"]
    before = len(calls)
    with Runner(db_url) as runner:
        run_id = runner.submit(SOLVER_REF, "2+3?")
        result = runner.resume(run_id[:12])
    assert (result.stop_reason, result.output, result.steps) == ("final", "5", 2)
    assert len(calls) - before == 2


def test_resume_of_a_run_without_a_reference_needs_the_agent(db_url: str) -> None:
    with Runner(db_url) as runner:
        died_with(runner.engine, "anon", "2+3?", [])
        with pytest.raises(AgentLoadError, match="pass the agent"):
            runner.resume("anon")
        # Refusing gave the run back: it can be resumed at once with the agent.
        assert runner.row("anon").lease_owner is None
        result = runner.resume("anon", agent=Agent(solver, TOOLS))
    assert result.output == "5"


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_of_a_queued_run_finishes_it_at_once(db_url: str) -> None:
    with Runner(db_url) as runner:
        run_id = runner.submit(SOLVER_REF, "2+3?")
        result = runner.cancel(run_id)
        assert (result.status, result.stop_reason, result.steps) == ("finished", "cancelled", 0)
        row = runner.row(run_id)
        assert row.cancel_requested and row.finished_at is not None
        # Resuming a cancelled run gives the stored result: the model is never asked.
        model = FunctionModel(solver)
        again = runner.resume(run_id, agent=Agent(model, TOOLS))
        # Cancelling again changes nothing.
        assert runner.cancel(run_id).stop_reason == "cancelled"
        # It never started: its journal is its task, saying what was cancelled.
        [task] = runner.journal(run_id)
        assert (task.kind, task.content) == (EntryKind.TASK, "2+3?")
    assert model.calls == 0
    assert again.stop_reason == "cancelled"


def test_a_cancelled_run_whose_worker_died_is_finished_when_its_lease_lapses(
    db_url: str,
) -> None:
    """A run held under a live lease by a worker that died (on another host): the cancel
    only asks it to stop, and no step of it comes; once the lease lapses a worker's look
    finishes it `cancelled`, under a new epoch, without taking it over or running a step
    (it never started: its task is journaled)."""
    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        run_id = runner.submit(SOLVER_REF, "2+3?")
        held = leases.claim_run(
            runner.engine, run_id, owner="gone.example:4242:1", lease_seconds=30,
            max_resumes=3, clock=runner.clock,
        )  # fmt: skip
        runner.cancel(run_id)
        row = runner.row(run_id)
        assert row.status is RunStatus.RUNNING and row.cancel_requested
        assert runner.store.finish_lapsed_cancels() == []  # its lease still lives
        clock.advance(31)
        [done] = runner.store.finish_lapsed_cancels()
        assert done.id == run_id and done.stop_reason == "cancelled"
        assert done.lease_epoch == held.epoch + 1 and done.lease_owner is None
        assert [entry.kind for entry in runner.journal(run_id)] == [EntryKind.TASK]
        assert runner.store.finish_lapsed_cancels() == []
        assert runner.get(run_id).stop_reason == "cancelled"


def test_a_run_cancelled_while_its_worker_was_dead_stops_at_once(db_url: str) -> None:
    with Runner(db_url) as runner:
        first = tool_action("orphan", 1, "add", {"a": 2, "b": 3}, Counters(), tokens=3)
        died_with(runner.engine, "orphan", "2+3?", [first, observation(first, "5")])
        epoch = runner.row("orphan").lease_epoch
        cancelled = runner.cancel("orphan")  # nobody holds it live: no step will come
        row = runner.row("orphan")
        model = FunctionModel(solver)
        result = runner.resume("orphan", agent=Agent(model, TOOLS))
    assert model.calls == 0
    assert (cancelled.status, cancelled.stop_reason) == ("finished", "cancelled")
    assert (cancelled.steps, cancelled.tokens) == (1, 3)
    # A new epoch fences out the worker, should it only have seemed dead.
    assert row.lease_epoch == epoch + 1 and row.lease_owner is None
    assert fields(result) == fields(cancelled)


def test_cancel_of_a_finished_run_changes_nothing(db_url: str) -> None:
    with Runner(db_url) as runner:
        done = runner.run(Agent(solver, TOOLS), "2+3?")
        after = runner.cancel(done.run_id or "")
    assert fields(after) == fields(done)


def test_cancel_from_another_runner_stops_the_run_before_its_next_step(db_url: str) -> None:
    def model(transcript: Transcript) -> dict[str, Any]:
        if len(observations(transcript)) == 1:
            # Somebody else, with their own Runner, cancels while this step is in flight.
            with Runner(db_url) as other:
                assert other.cancel("busy").status == "running"
        return {"type": "tool", "name": "search", "args": {"q": len(transcript)}}

    counted = FunctionModel(model)
    with Runner(db_url) as runner:
        result = runner.run(Agent(counted, TOOLS), "busy work", id="busy", max_steps=8)
        stored = runner.get("busy")
    # Step 2 was under way when the cancel came: it completes, step 3 never starts.
    assert counted.calls == 2
    assert (result.stop_reason, result.steps, result.output) == ("cancelled", 2, None)
    assert len(observations(result.transcript)) == 2
    assert fields(stored) == fields(result)


def test_cancel_of_a_slow_run_in_another_thread(db_url: str) -> None:
    entered, go_on = threading.Event(), threading.Event()

    def slow(transcript: Transcript) -> dict[str, Any]:
        entered.set()
        assert go_on.wait(60)
        return {"type": "tool", "name": "search", "args": {"q": len(transcript)}}

    counted = FunctionModel(slow)
    outcome: list[Any] = []

    def work() -> None:
        with Runner(db_url) as runner:
            outcome.append(runner.run(Agent(counted, TOOLS), "slow", id="slow"))

    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert entered.wait(60)
        with Runner(db_url) as runner:
            assert runner.cancel("slow").status == "running"  # held: stops at its next step
    finally:
        go_on.set()
        worker.join(60)
    assert not worker.is_alive()
    (result,) = outcome
    assert counted.calls == 1
    assert (result.stop_reason, result.steps) == ("cancelled", 1)
    assert len(observations(result.transcript)) == 1


# -- budgets are durable state ---------------------------------------------------------------


def test_a_token_budget_is_counted_across_a_resume(db_url: str) -> None:
    budgets = {"max_tokens": 10, "max_steps": 8}
    expected = run_agent(wander(4), TOOLS, "spend", **budgets)
    assert (expected.stop_reason, expected.steps) == ("token_budget", 3)

    with Runner(db_url) as runner:
        with pytest.raises(Crash):
            runner.run(Agent(crashes_on_call(3, wander(4)), TOOLS), "spend", id="spend", **budgets)
        assert runner.get("spend").tokens == 8
        crash(runner.engine, "spend")
        # The agent resumed with has the default (large) budgets: the run's own still rule.
        resumed_model = FunctionModel(wander(4))
        result = runner.resume("spend", agent=Agent(resumed_model, TOOLS))
    assert resumed_model.calls == 1  # step 3 only: steps 1 and 2 are in the journal
    assert fields(result) == fields(expected)
    assert result.tokens == 12


def test_budgets_passed_to_run_override_the_agents_and_are_stored(db_url: str) -> None:
    agent = Agent(wander(), TOOLS, max_steps=3, max_repeats=5)
    with Runner(db_url) as runner:
        result = runner.run(agent, "wander", max_steps=2)
        row = runner.row(result.run_id or "")
    assert (result.stop_reason, result.steps) == ("max_steps", 2)
    assert row.budgets["max_steps"] == 2
    assert row.budgets["max_repeats"] == 5


def test_an_unknown_budget_is_refused(db_url: str) -> None:
    with Runner(db_url) as runner:
        with pytest.raises(ValueError, match="unknown budget"):
            runner.run(Agent(solver, TOOLS), "t", max_stpes=3)
        assert count_runs(runner.engine) == 0


def test_the_time_budget_deadline_is_stored_and_survives_a_resume(db_url: str) -> None:
    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        with pytest.raises(Crash):
            runner.run(
                Agent(crashes_on_call(2, wander()), TOOLS), "clock", id="clock", max_seconds=0.5
            )
        row = runner.row("clock")
        assert row.deadline is not None and row.leased_at is not None
        assert (row.deadline - row.leased_at).total_seconds() == 0.5
        crash(runner.engine, "clock")
        clock.advance(0.6)
        # A resume does not restart the clock: the deadline passed while nobody ran it.
        resumed_model = FunctionModel(wander())
        result = runner.resume("clock", agent=Agent(resumed_model, TOOLS))
        after = runner.row("clock")
    assert resumed_model.calls == 0
    assert (result.stop_reason, result.steps) == ("time_budget", 1)
    assert after.deadline == row.deadline


def test_the_deadline_starts_when_a_worker_first_takes_the_run(db_url: str) -> None:
    clock = ManualClock()
    with Runner(db_url, clock=clock) as runner:
        run_id = runner.submit(SOLVER_REF, "2+3?", max_seconds=60)
        assert runner.row(run_id).deadline is None  # queued: the clock has not started
        clock.advance(0.2)
        result = runner.resume(run_id)
        row = runner.row(run_id)
    assert result.stop_reason == "final"
    assert row.deadline is not None and row.leased_at is not None
    assert (row.deadline - row.leased_at).total_seconds() == 60
    assert (row.deadline - row.created_at).total_seconds() == 60.2


def test_a_budget_given_as_none_is_unlimited_and_one_not_given_is_the_agents(
    db_url: str,
) -> None:
    def spender(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "final", "content": "done", "usage": 50_000}

    agent = Agent(spender, {}, max_tokens=100)
    with Runner(db_url) as runner:
        assert runner.run(agent, "t").stop_reason == "token_budget"
        unlimited = runner.run(agent, "t", max_tokens=None)
        assert unlimited.stop_reason == "final"
        assert runner.row(unlimited.run_id or "").budgets["max_tokens"] is None


def test_a_task_with_a_nul_character_is_refused_before_anything_is_stored(db_url: str) -> None:
    with Runner(db_url) as runner:
        with pytest.raises(ValueError, match="NUL"):
            runner.run(Agent(solver, TOOLS), "2+3?\x00")
        assert runner.list() == []
