"""Replay, on SQLite and PostgreSQL: today's agent code against a recorded run, with no
model called and no tool run, and the first step where it would act differently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner import Agent, OpenAIChat, Runner, tool
from runner.core.agent import load_agent
from runner.core.counters import Counters

from .ledgered_steps import LedgeredSteps, run_to_the_end
from .operating_agents import ref
from .support import died_with, observation, tool_action


def ledgers() -> tuple[list[int], list[str]]:
    module: dict[str, Any] = load_agent(ref("counter")).model.__globals__
    return module["MODEL_CALLS"], module["TOOL_CALLS"]


@pytest.fixture
def recorded(db_url: str) -> str:
    """A finished run of the counter: add three times, then answer 3."""
    with Runner(db_url) as runner:
        assert runner.run(ref("counter"), "count", id="prod-1").output == "3"
    return db_url


def test_the_same_code_agrees_to_the_end_and_nothing_runs(recorded: str) -> None:
    model_calls, tool_calls = ledgers()
    before = (len(model_calls), len(tool_calls))
    with Runner(recorded) as runner:
        report = runner.replay("prod-1")
        relabelled = runner.replay("prod-1", agent=ref("relabelled"))
    assert (report.agrees, report.steps, report.stop_reason, report.step) == (
        True,
        4,
        "final",
        None,
    )
    assert report.note is None
    assert relabelled.agrees  # a release label changes no step
    assert (len(model_calls), len(tool_calls)) == before  # no model called, no tool run


CHANGES = [
    # agent, step, what the run did, what the agent would do now
    ("without_add", 1, 'called add({"a": 0, "b": 1})',
     "has no tool add: it would observe LookupError: unknown tool add"),
    ("new_signature", 1, 'called add({"a": 0, "b": 1})',
     "would call add, which no longer takes these arguments (missing a required argument: "
     "'x'): TypeError"),
    ("new_context", 2, "asked the model with the transcript so far",
     "has a context function that raises KeyError: 'summary': the run would stop with "
     "model_error"),
]  # fmt: skip


@pytest.mark.parametrize(("agent", "step", "was", "now"), CHANGES, ids=[c[0] for c in CHANGES])
def test_changed_code_differs_at_its_first_step(
    recorded: str, agent: str, step: int, was: str, now: str
) -> None:
    model_calls, tool_calls = ledgers()
    before = (len(model_calls), len(tool_calls))
    with Runner(recorded) as runner:
        report = runner.replay("prod-1", agent=ref(agent))
    assert (report.agrees, report.step, report.recorded, report.now) == (False, step, was, now)
    assert (len(model_calls), len(tool_calls)) == before


def test_budgets_that_stop_earlier_or_later_differ_at_the_recorded_stop(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(ref("counter"), "count", id="short", max_steps=2)
        assert runner.replay("short").agrees  # under the run's own budgets
        later = runner.replay("short", agent_budgets=True)  # the agent's: max_steps 8
        runner.run(ref("counter"), "count", id="long")
        counter = load_agent(ref("counter"))
        short_agent = Agent(counter.model, counter.tools, max_steps=2)
        earlier = runner.replay("long", agent=short_agent, agent_budgets=True)
    assert (later.agrees, later.step, later.recorded, later.now) == (
        False, 2, "stopped with max_steps", "goes on to step 3",
    )  # fmt: skip
    assert (earlier.agrees, earlier.step, earlier.now) == (False, 2, "stops with max_steps")
    assert earlier.recorded == 'called add({"a": 2, "b": 1})'


def test_a_stop_that_no_step_decides_is_noted(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(ref("counter"), "count", id="late", max_seconds=0)
        first = tool_action("crashed", 1, "add", {"a": 0, "b": 1}, Counters())
        died_with(runner.engine, "crashed", "count", [first, observation(first, "1")],
                  agent=ref("counter"))  # fmt: skip
        late = runner.replay("late")
        crashed = runner.replay("crashed")
    assert (
        late.agrees
        and late.note == "the run stopped with time_budget, which no recorded step decides"
    )
    assert crashed.agrees and crashed.note == "the run has not stopped (running): checked so far"
    assert crashed.steps == 1


def test_a_pending_call_is_neither_settled_nor_run(db_url: str) -> None:
    ran: list[int] = []

    @tool(idempotent=True)
    def add(a: int, b: int) -> int:
        ran.append(a)
        return a + b

    with Runner(db_url) as runner:
        first = tool_action("pending", 1, "add", {"a": 0, "b": 1}, Counters())
        died_with(runner.engine, "pending", "count", [first])
        report = runner.replay("pending", agent=Agent(_never, {"add": add}))
    assert report.agrees and ran == []


def _never(transcript: list[dict[str, Any]]) -> Any:
    raise AssertionError("a replay called the model")


class PickyChat(OpenAIChat):
    """An adapter whose request building changed: it no longer accepts tool results."""

    def request(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if any(message["role"] == "tool" for message in transcript):
            raise ValueError("tool results are not supported")
        return super().request(transcript)


def test_a_model_adapter_must_still_build_the_recorded_requests(recorded: str) -> None:
    counter = load_agent(ref("counter"))
    # No key, no server: a replay builds each request and sends none.
    same = Agent(OpenAIChat("gpt-test", api_key="unused"), counter.tools)
    picky = Agent(PickyChat("gpt-test", api_key="unused"), counter.tools)
    with Runner(recorded) as runner:
        assert runner.replay("prod-1", agent=same).agrees
        report = runner.replay("prod-1", agent=picky)
    assert (report.agrees, report.step) == (False, 2)
    assert report.now == (
        "has a model adapter that cannot build the request (ValueError: tool results are not "
        "supported): the run would stop with model_error"
    )


# -- steps of several calls, approvals, and every boundary inside a step ---------------------


def test_a_run_with_steps_of_several_calls_and_an_approval_replays_with_nothing_run(
    db_url: str, tmp_path: Path
) -> None:
    steps = LedgeredSteps(tmp_path / "ledger")
    with Runner(db_url) as runner:
        run_to_the_end(runner, steps.agent, "p", "shop")
        for at_step in (1, 2, 3):
            run_to_the_end(runner, steps.agent, runner.fork("p", at_step, id=f"f{at_step}"), None)
        ran = steps.calls()
        reports = [runner.replay(run, agent=steps.agent) for run in ("p", "f1", "f2", "f3")]
        missing = Agent(steps.agent.model, {**steps.agent.tools})
        del missing.tools["note"]
        differs = runner.replay("p", agent=missing)
    assert [(r.agrees, r.steps, r.stop_reason, r.note) for r in reports] == [
        (True, 4, "final", None)
    ] * 4
    assert steps.calls() == ran  # no tool ran again
    # The first call of a step of several that the agent can no longer make is found.
    assert (differs.agrees, differs.step, differs.recorded) == (
        False, 1, 'called note({"text": "a"})',
    )  # fmt: skip


def test_a_run_cut_at_every_boundary_inside_a_step_replays_so_far_with_nothing_run(
    db_url: str, tmp_path: Path
) -> None:
    """A record that ends anywhere (after a step's calls, between their results, at a wait,
    after its answer) agrees so far: nothing pending is settled, nothing waiting is asked."""
    steps = LedgeredSteps(tmp_path / "ledger")
    with Runner(db_url) as runner:
        run_to_the_end(runner, steps.agent, "p", "shop")
        journal = runner.journal("p")
        ran = steps.calls()
        # Every cut but the whole: the answer is written with the run's stop, in one commit.
        for cut in range(1, len(journal)):
            died_with(runner.engine, f"cut{cut}", "shop", journal[1:cut])
            report = runner.replay(f"cut{cut}", agent=steps.agent)
            last = journal[cut - 1]
            assert (report.agrees, report.steps, report.step) == (True, last.step, None), (
                cut, last.kind, report,
            )  # fmt: skip
            assert report.note == "the run has not stopped (running): checked so far"
            assert steps.calls() == ran, (cut, last.kind)
