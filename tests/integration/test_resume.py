"""Resuming after a crash, simulated in-process: the journal is written as a worker that died
would have left it (a pending tool call: an action row without its observation), the dead
worker's lease is made free, then `Runner.resume` settles the call by the step protocol."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from runner import NOT_APPLIED, Agent, Runner, ToolCall, current_call, run_agent, tool
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.sql import leases
from runner.testing import FunctionModel

from .support import (
    DEAD_OWNER,
    TOOLS,
    Crash,
    Transcript,
    count_entries,
    crash,
    crashes_on_call,
    died_with,
    entry_rows,
    failing_division,
    fields,
    malformed_then_json,
    observation,
    observations,
    recovers,
    solver,
    tool_action,
    wander,
    wraps_up,
)


def answers_last_observation(first_call: dict[str, Any]) -> FunctionModel:
    """A model that makes `first_call` at step 1 and then answers with what it observed."""

    def model(transcript: Transcript) -> dict[str, Any]:
        seen = observations(transcript)
        if not seen:
            return first_call
        return {"type": "final", "content": seen[-1]["content"]}

    return FunctionModel(model)


def pending(engine: Engine, run_id: str, name: str, args: dict[str, Any], **budgets: Any) -> None:
    """A run whose worker died while `name` was running for step 1."""
    action = tool_action(run_id, 1, name, args, Counters(), tokens=5)
    died_with(engine, run_id, "do it", [action], Budgets(**budgets) if budgets else None)


def observation_row(engine: Engine, run_id: str, step: int = 1) -> dict[str, Any]:
    (row,) = [
        r for r in entry_rows(engine, run_id) if r["kind"] == "observation" and r["step"] == step
    ]
    return row


# -- recorded actions are not asked for again --------------------------------------------------


def test_a_completed_step_is_replayed_not_asked_again(db_url: str) -> None:
    ran: list[dict[str, Any]] = []

    def add(a: int, b: int) -> int:
        ran.append({"a": a, "b": b})
        return a + b

    model = answers_last_observation({"type": "tool", "name": "add", "args": {"a": 1, "b": 1}})
    with Runner(db_url) as runner:
        action = tool_action("done1", 1, "add", {"a": 2, "b": 3}, Counters(), tokens=5)
        died_with(runner.engine, "done1", "do it", [action, observation(action, "5")])
        result = runner.resume("done1", agent=Agent(model, {"add": add}))
        rows = entry_rows(runner.engine, "done1")
    # The model is asked for step 2 only, and is shown step 1 as the journal has it.
    assert model.calls == 1
    assert model.seen[0][1] == {"role": "assistant", "tool": "add", "args": {"a": 2, "b": 3}}
    assert ran == []
    assert (result.stop_reason, result.output, result.steps, result.tokens) == ("final", "5", 2, 5)
    assert [r["kind"] for r in rows] == ["task", "action", "observation", "final"]


def test_a_pending_action_is_not_asked_of_the_model_again(db_url: str) -> None:
    calls: list[ToolCall | None] = []

    @tool(idempotent=True)
    def add(a: int, b: int) -> int:
        calls.append(current_call())
        return a + b

    # Asked for step 1, this model would add 1 and 1: the journal says 2 and 3.
    model = answers_last_observation({"type": "tool", "name": "add", "args": {"a": 1, "b": 1}})
    with Runner(db_url) as runner:
        pending(runner.engine, "p1", "add", {"a": 2, "b": 3})
        result = runner.resume("p1", agent=Agent(model, {"add": add}))
    assert model.calls == 1
    assert (result.output, result.steps, result.tokens) == ("5", 2, 5)
    assert len(calls) == 1


# -- settling a pending call ----------------------------------------------------------------


def test_an_idempotent_tool_runs_again_with_the_same_key(db_url: str) -> None:
    calls: list[ToolCall | None] = []

    @tool(idempotent=True)
    def charge(amount: int) -> str:
        calls.append(current_call())
        return f"charged {amount}"

    model = answers_last_observation({"type": "tool", "name": "charge", "args": {"amount": 9}})
    with Runner(db_url) as runner:
        pending(runner.engine, "idem", "charge", {"amount": 7})
        result = runner.resume("idem", agent=Agent(model, {"charge": charge}))
        row = observation_row(runner.engine, "idem")
    assert calls == [ToolCall("idem", 1, 2, "idem-1")]
    assert (row["attempt"], row["idempotency_key"], row["is_error"]) == (2, "idem-1", False)
    assert row["content"] == "charged 7"
    assert (result.stop_reason, result.output) == ("final", "charged 7")
    assert model.calls == 1


def test_a_tool_taking_the_key_gets_the_same_key(db_url: str) -> None:
    keys: list[str] = []

    def send(to: str, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return f"sent to {to}"

    model = answers_last_observation({"type": "tool", "name": "send", "args": {"to": "x"}})
    with Runner(db_url) as runner:
        pending(runner.engine, "keyed", "send", {"to": "bob"})
        result = runner.resume("keyed", agent=Agent(model, {"send": send}))
        row = observation_row(runner.engine, "keyed")
    assert keys == ["keyed-1"]
    assert (row["attempt"], row["idempotency_key"]) == (2, "keyed-1")
    assert result.output == "sent to bob"
    # The key is the runner's, never part of the args the model sees.
    assert result.transcript[1] == {"role": "assistant", "tool": "send", "args": {"to": "bob"}}


def test_each_takeover_is_one_more_attempt(db_url: str) -> None:
    attempts: list[int] = []

    @tool(idempotent=True)
    def flaky(n: int) -> str:
        call = current_call()
        assert call is not None
        attempts.append(call.attempt)
        if call.attempt < 3:
            raise Crash  # the worker dies inside the tool again
        return f"ok {n}"

    agent = Agent(
        answers_last_observation({"type": "tool", "name": "flaky", "args": {}}), {"flaky": flaky}
    )
    with Runner(db_url) as runner:
        pending(runner.engine, "again", "flaky", {"n": 1})
        with pytest.raises(Crash):
            runner.resume("again", agent=agent)
        crash(runner.engine, "again")
        result = runner.resume("again", agent=agent)
        row = observation_row(runner.engine, "again")
        run = runner.row("again")
    assert attempts == [2, 3]
    assert row["attempt"] == 3
    assert result.output == "ok 1"
    assert run.resumes == 2


def test_a_reconcile_hook_that_finds_the_call_applied_settles_it(db_url: str) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []
    ran: list[int] = []

    def check(key: str, args: dict[str, Any]) -> Any:
        asked.append((key, args))
        return "order 42 placed"

    @tool(reconcile=check)
    def place(qty: int) -> str:
        ran.append(qty)
        return "placed again"

    model = answers_last_observation({"type": "tool", "name": "place", "args": {"qty": 1}})
    with Runner(db_url) as runner:
        pending(runner.engine, "rec", "place", {"qty": 3})
        result = runner.resume("rec", agent=Agent(model, {"place": place}))
        row = observation_row(runner.engine, "rec")
    assert asked == [("rec-1", {"qty": 3})]
    assert ran == []  # applied: the tool is not run again
    assert (row["content"], row["is_error"], row["idempotency_key"]) == (
        "order 42 placed",
        False,
        "rec-1",
    )
    assert result.output == "order 42 placed"


def test_a_reconcile_hook_that_says_not_applied_runs_the_tool(db_url: str) -> None:
    asked: list[str] = []
    ran: list[ToolCall | None] = []

    def check(key: str, args: dict[str, Any]) -> Any:
        asked.append(key)
        return NOT_APPLIED

    @tool(reconcile=check)
    def place(qty: int) -> str:
        ran.append(current_call())
        return f"placed {qty}"

    model = answers_last_observation({"type": "tool", "name": "place", "args": {"qty": 1}})
    with Runner(db_url) as runner:
        pending(runner.engine, "rec2", "place", {"qty": 3})
        result = runner.resume("rec2", agent=Agent(model, {"place": place}))
        row = observation_row(runner.engine, "rec2")
    assert asked == ["rec2-1"]
    assert ran == [ToolCall("rec2", 1, 2, "rec2-1")]
    assert (row["content"], row["attempt"]) == ("placed 3", 2)
    assert result.output == "placed 3"


def test_a_reconcile_hook_that_fails_leaves_the_outcome_unknown(db_url: str) -> None:
    ran: list[int] = []

    def check(key: str, args: dict[str, Any]) -> Any:
        raise ConnectionError("ledger unreachable")

    @tool(reconcile=check)
    def place(qty: int) -> str:
        ran.append(qty)
        return "placed"

    model = answers_last_observation({"type": "tool", "name": "place", "args": {"qty": 1}})
    with Runner(db_url) as runner:
        pending(runner.engine, "rec3", "place", {"qty": 3})
        result = runner.resume("rec3", agent=Agent(model, {"place": place}))
    assert ran == []
    seen = observations(model.seen[0])
    assert seen[0]["is_error"] is True
    assert seen[0]["content"].startswith("OutcomeUnknown:")
    assert "ledger unreachable" in seen[0]["content"]
    assert result.stop_reason == "final"


def test_any_other_tool_is_not_run_again_and_the_model_is_told(db_url: str) -> None:
    ran: list[str] = []

    def transfer(to: str) -> str:
        ran.append(to)
        return "transferred"

    model = answers_last_observation({"type": "tool", "name": "transfer", "args": {"to": "x"}})
    with Runner(db_url) as runner:
        pending(runner.engine, "plain", "transfer", {"to": "bob"})
        result = runner.resume("plain", agent=Agent(model, {"transfer": transfer}))
        row = observation_row(runner.engine, "plain")
    assert ran == []
    assert model.calls == 1
    shown = observations(model.seen[0])
    assert shown == [
        {"role": "tool", "name": "transfer", "content": row["content"], "is_error": True}
    ]
    assert row["content"].startswith("OutcomeUnknown: transfer")
    assert "plain-1" in row["content"]
    assert row["is_error"]
    assert result.output == row["content"]


def test_an_unknown_outcome_counts_toward_the_error_streak(db_url: str) -> None:
    def transfer(to: str) -> str:
        return "transferred"

    def model(transcript: Transcript) -> dict[str, Any]:
        return {"type": "tool", "name": "nope", "args": {"n": len(transcript)}}

    with Runner(db_url) as runner:
        pending(runner.engine, "streak", "transfer", {"to": "bob"}, max_consecutive_errors=1)
        result = runner.resume("streak", agent=Agent(model, {"transfer": transfer}))
    # Step 1's unknown outcome and step 2's unknown tool: two errors in a row > 1.
    assert (result.stop_reason, result.steps) == ("tool_errors", 2)


# -- a crash anywhere changes nothing --------------------------------------------------------

CRASH_CASES: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "solver": (solver, "2+3?", {}),
    "recovers": (recovers, "recover", {}),
    "tool_errors": (failing_division, "fail", {}),
    "token_budget": (wander(4000), "spend", {}),
    "malformed_output": (malformed_then_json, "malformed", {}),
    "wrap_up": (wraps_up, "wrap", {"max_steps": 2, "wrap_up": True}),
}


def idempotent_tools(crash_on: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """TOOLS, declared idempotent, recording their calls; the `crash_on`-th call dies."""
    made: list[str] = []

    def wrap(name: str, fn: Any) -> Any:
        def call(**kwargs: Any) -> Any:
            made.append(name)
            if len(made) == crash_on:
                raise Crash
            return fn(**kwargs)

        return tool(idempotent=True)(call)

    return {name: wrap(name, fn) for name, fn in TOOLS.items()}, made


@pytest.mark.parametrize("name", sorted(CRASH_CASES))
def test_a_crash_at_any_model_call_changes_nothing(db_url: str, name: str) -> None:
    model, task, budgets = CRASH_CASES[name]
    counted = FunctionModel(model)
    expected = run_agent(counted, TOOLS, task, **budgets)
    with Runner(db_url) as runner:
        for k in range(1, counted.calls + 1):
            run_id = f"{name}-{k}"
            with pytest.raises(Crash):
                runner.run(Agent(crashes_on_call(k, model), TOOLS), task, id=run_id, **budgets)
            crash(runner.engine, run_id)
            resumed = FunctionModel(model)
            result = runner.resume(run_id, agent=Agent(resumed, TOOLS))
            # Steps before the crash come from the journal; the crashed call is made again.
            assert resumed.calls == counted.calls - k + 1, k
            assert fields(result) == fields(expected), k
            assert fields(runner.get(run_id)) == fields(expected), k


@pytest.mark.parametrize("name", sorted(CRASH_CASES))
def test_a_crash_in_any_idempotent_tool_call_changes_nothing(db_url: str, name: str) -> None:
    model, task, budgets = CRASH_CASES[name]
    tools, made = idempotent_tools()
    expected = run_agent(model, tools, task, **budgets)
    with Runner(db_url) as runner:
        for k in range(1, len(made) + 1):
            run_id = f"{name}-{k}"
            crashing, _ = idempotent_tools(crash_on=k)
            with pytest.raises(Crash):
                runner.run(Agent(model, crashing), task, id=run_id, **budgets)
            crash(runner.engine, run_id)
            again, made_again = idempotent_tools()
            result = runner.resume(run_id, agent=Agent(FunctionModel(model), again))
            assert fields(result) == fields(expected), k
            assert len(made_again) == len(made) - k + 1, k  # the interrupted call ran again
            retried = [r for r in entry_rows(runner.engine, run_id) if r["attempt"] == 2]
            assert [r["kind"] for r in retried] == ["observation"], k


# -- crash loops -------------------------------------------------------------------------------


def test_a_run_that_keeps_killing_its_worker_stops_with_crash_loop(db_url: str) -> None:
    attempts: list[int] = []

    @tool(idempotent=True)
    def explode() -> str:
        call = current_call()
        assert call is not None
        attempts.append(call.attempt)
        raise Crash  # kills the worker every time, before the observation is written

    model = FunctionModel(lambda tr: {"type": "final", "content": "unreachable"})
    agent = Agent(model, {"explode": explode})
    with Runner(db_url, max_resumes=2) as runner:
        pending(runner.engine, "loop", "explode", {})
        entries_before = count_entries(runner.engine, "loop")
        # The first takeover follows a worker that made progress; the next ones do not.
        for _ in range(3):
            with pytest.raises(Crash):
                runner.resume("loop", agent=agent)
            crash(runner.engine, "loop")
        result = runner.resume("loop", agent=agent)
        again = runner.resume("loop", agent=agent)
        run = runner.row("loop")
        entries_after = count_entries(runner.engine, "loop")
    assert attempts == [2, 3, 4]  # not a fourth time: the run was given up instead
    assert model.calls == 0
    assert (result.status, result.stop_reason) == ("finished", "crash_loop")
    assert (result.steps, result.tokens) == (1, 5)
    assert result.error is not None
    assert result.error.startswith("resumed 3 times in a row without a new journal entry")
    assert "its last owner had died without releasing the run" in result.error
    assert "runner resume loop --max-resumes N" in result.error
    assert fields_of(again) == fields_of(result)
    assert (run.resumes, run.lease_owner) == (4, None)
    assert entries_after == entries_before


def fields_of(result: Any) -> tuple[Any, ...]:
    return (result.stop_reason, result.steps, result.tokens, result.error, result.transcript)


def test_takeovers_that_make_progress_are_not_a_crash_loop(db_url: str) -> None:
    @tool(idempotent=True)
    def step(n: int) -> str:
        call = current_call()
        assert call is not None
        if call.attempt == 1:
            raise Crash  # every step's first attempt kills the worker; the retry succeeds
        return f"step {n} done"

    def model(transcript: Transcript) -> dict[str, Any]:
        done = len(observations(transcript))
        if done == 4:
            return {"type": "final", "content": "all done"}
        return {"type": "tool", "name": "step", "args": {"n": done + 1}}

    agent = Agent(model, {"step": step})
    with Runner(db_url, max_resumes=1) as runner:
        with pytest.raises(Crash):
            runner.run(agent, "four steps", id="steady")
        for _ in range(4):
            crash(runner.engine, "steady")
            try:
                result = runner.resume("steady", agent=agent)
            except Crash:
                continue
            break
        run = runner.row("steady")
    assert (result.stop_reason, result.output, result.steps) == ("final", "all done", 5)
    assert run.resumes == 4


def test_a_released_run_is_not_a_takeover(db_url: str) -> None:
    with Runner(db_url, max_resumes=1) as runner:
        pending(runner.engine, "calm", "anything", {})
        engine = runner.engine
        for _ in range(4):
            claim = leases.claim_run(
                engine, "calm", owner=DEAD_OWNER, lease_seconds=60, max_resumes=1
            )
            assert not claim.crash_loop
            leases.release_run(engine, "calm", claim.epoch)
        run = runner.row("calm")
    # Only the first claim took over from the worker that died; the others were handed back.
    assert run.resumes == 1
    assert (run.status, run.lease_owner) == ("queued", None)


def test_a_journal_the_code_no_longer_agrees_with_is_a_replay_mismatch(db_url: str) -> None:
    """Replay checks each recorded decision against what the loop decides now."""
    from runner import ReplayMismatch
    from runner.core.journal import Entry, EntryKind

    # Recorded as an answer by code that let 50 tokens through; the stored budget of 10
    # tokens makes the loop refuse that same action now.
    answered = Entry(
        EntryKind.FINAL,
        1,
        Counters(steps=1, tokens=50),
        content="5",
        action_type="final",
        tokens=50,
    )
    model = FunctionModel(solver)
    with Runner(db_url) as runner:
        died_with(runner.engine, "mm", "2+3?", [answered], Budgets(max_tokens=10))
        with pytest.raises(ReplayMismatch, match="step 1 was recorded as final"):
            runner.resume("mm", agent=Agent(model, TOOLS))
        assert runner.get("mm").status == "running"  # nothing was written over the journal
    assert model.calls == 0
