"""OpenAI Agents SDK agents under `RunnerAgent`, on SQLite and PostgreSQL: the SDK's own
Runner and its chat-completions model over HTTP to the local server, crashed and resumed.

A resumed run replays the SDK's loop from the start, fed the journal's responses and tool
outcomes: the model is asked only for what the journal lacks, a journaled tool never runs
again, and the requests it sends are an uncrashed run's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent as SdkAgent
from agents import OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

from runner import Runner
from runner.core.calls import invoke
from runner.integrations.openai_agents import RunnerAgent
from tests.integration.support import Crash, crash
from tests.providers.conftest import KEY
from tests.providers.fake_servers import FakeServer, openai_completion, serving

TASK = "What is (2 + 3) * 7?"

_clients: list[AsyncOpenAI] = []


def chat_model(url: str) -> OpenAIChatCompletionsModel:
    """The SDK's chat-completions model over its own client, pointed at the local server."""
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY)
    _clients.append(client)
    return OpenAIChatCompletionsModel("gpt-4.1-mini", client)


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        invoke(_clients.pop().close, (), {}, None)


def script(server: FakeServer) -> None:
    server.reply(openai_completion("Adding.", calls=[("call_1", "add", '{"a": 2, "b": 3}')]))
    server.reply(openai_completion(calls=[("call_2", "multiply", '{"a": 5, "b": 7}')]))
    server.reply(openai_completion("35"))


class Calculator:
    """An Agents SDK agent with two tools, counting their calls; `multiply` can be told to
    die mid-call (as SIGKILL would) and is idempotent only when told."""

    def __init__(
        self, url: str, *, crash_in: str | None = None, idempotent: bool = True, **budgets: Any
    ) -> None:
        self.calls: list[str] = []
        self.crash_in = crash_in

        @function_tool
        def add(a: float, b: float) -> float:
            """Add two numbers."""
            return self.call("add", a + b)

        @function_tool
        def multiply(a: float, b: float) -> float:
            """Multiply two numbers."""
            return self.call("multiply", a * b)

        agent = SdkAgent(
            name="calculator", instructions="Use the tools.", tools=[add, multiply],
            model=chat_model(url),
        )  # fmt: skip
        named = {"add", "multiply"} if idempotent else {"add"}
        self.agent = RunnerAgent(agent, idempotent=named, **{"max_steps": 5, **budgets})

    def call(self, name: str, result: float) -> float:
        self.calls.append(name)
        if name == self.crash_in:
            raise Crash
        return result


def test_a_durable_run_journals_each_request_and_call(db_url: str, server: FakeServer) -> None:
    script(server)
    calculator = Calculator(server.url)
    with Runner(db_url) as runner:
        result = runner.run(calculator.agent, TASK, id="sdk-final")
        rows = runner.journal("sdk-final")
    assert (result.stop_reason, result.output, result.steps) == ("final", "35", 3)
    assert result.tokens == 3 * 120
    assert calculator.calls == ["add", "multiply"]
    assert [(row.kind, row.tool, row.idempotency_key) for row in rows] == [
        ("task", None, None),
        ("action", "add", "sdk-final-1"),
        ("observation", "add", "sdk-final-1"),
        ("action", "multiply", "sdk-final-2"),
        ("observation", "multiply", "sdk-final-2"),
        ("final", None, None),
    ]


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_a_crash_mid_tool_resumes_without_asking_or_running_twice(
    db_url: str, idempotent: bool
) -> None:
    with serving() as clean:
        script(clean)
        with Runner(db_url) as runner:
            runner.run(Calculator(clean.url).agent, TASK, id="clean")
    with serving() as crashed:
        script(crashed)
        dying = Calculator(crashed.url, crash_in="multiply", idempotent=idempotent)
        with Runner(db_url) as runner:
            with pytest.raises(Crash):
                runner.run(dying.agent, TASK, id="crashed")
            assert len(crashed.requests) == 2  # it died inside multiply
            crash(runner.engine, "crashed")
        calculator = Calculator(crashed.url, idempotent=idempotent)
        with Runner(db_url) as runner:
            result = runner.resume("crashed", agent=calculator.agent)
            rows = runner.journal("crashed")
        assert len(crashed.requests) == 3  # no response asked for twice
    multiply = [row for row in rows if row.kind == "observation" and row.tool == "multiply"]
    assert [(row.attempt, row.is_error) for row in multiply] == [(2, not idempotent)]
    assert (result.stop_reason, result.output) == ("final", "35")
    if idempotent:
        assert calculator.calls == ["multiply"]  # add's outcome was journaled
        for got, want in zip(crashed.requests, clean.requests, strict=True):
            assert got.json == want.json
    else:
        assert calculator.calls == []
        sent = crashed.requests[2].json["messages"][-1]
        assert sent["role"] == "tool" and sent["content"].startswith("OutcomeUnknown")


def test_a_resume_whose_agent_changed_stops_as_diverged(db_url: str) -> None:
    with serving() as server:
        script(server)
        dying = Calculator(server.url, crash_in="multiply")
        with Runner(db_url) as runner:
            with pytest.raises(Crash):
                runner.run(dying.agent, TASK, id="changed")
            crash(runner.engine, "changed")
        bare = RunnerAgent(SdkAgent(name="bare", model=chat_model(server.url)))
        with Runner(db_url) as runner:
            result = runner.resume("changed", agent=bare)
    assert result.stop_reason == "diverged"
    assert "diverged from the journal" in (result.error or "")


def test_max_steps_stops_an_sdk_run(db_url: str, server: FakeServer) -> None:
    script(server)
    with Runner(db_url) as runner:
        result = runner.run(Calculator(server.url, max_steps=2).agent, TASK, id="capped")
    assert (result.stop_reason, result.steps) == ("max_steps", 2)
    assert len(server.requests) == 2


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied"])
def test_a_tool_that_needs_approval_parks_the_run_until_a_person_answers(
    db_url: str, server: FakeServer, approve: bool
) -> None:
    server.reply(openai_completion(calls=[("call_1", "refund", '{"order": "A-1"}')]))
    server.reply(openai_completion("Done."))
    refunds: list[str] = []

    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        refunds.append(order)
        return f"refunded {order}"

    shop = SdkAgent(name="shop", tools=[refund], model=chat_model(server.url))
    agent = RunnerAgent(shop)
    with Runner(db_url) as runner:
        parked = runner.run(agent, "Refund order A-1", id="gated")
        assert parked.status == "waiting" and refunds == []
        wait = runner.waiting_for("gated")
        assert wait is not None and (wait.tool, wait.args) == ("refund", {"order": "A-1"})
        if approve:
            runner.approve("gated", call=wait.call)
        else:
            runner.deny("gated", call=wait.call, reason="over the limit")
        result = runner.resume("gated", agent=agent)
    assert (result.stop_reason, result.output) == ("final", "Done.")
    assert refunds == (["A-1"] if approve else [])
    sent = server.requests[1].json["messages"][-1]
    assert sent["role"] == "tool"
    assert sent["content"] == ("refunded A-1" if approve else "Denied: over the limit")
    assert len(server.requests) == 2


def test_a_message_sent_to_an_sdk_run_is_one_user_turn_across_a_crash(
    db_url: str, server: FakeServer
) -> None:
    """Sent while the run waits for an approval: heard before step 2's request, journaled
    there once; a crash inside step 2's tool and a resume show it again in its place, once."""
    server.reply(openai_completion(calls=[("call_1", "refund", '{"order": "A-1"}')]))
    server.reply(openai_completion(calls=[("call_2", "note", '{"text": "brief"}')]))
    server.reply(openai_completion("Refunded A-1, briefly."))
    dying = [True]

    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    @function_tool
    def note(text: str) -> str:
        """Note something down."""
        if dying.pop() if dying else False:
            raise Crash
        return "noted"

    agent = RunnerAgent(SdkAgent(name="shop", tools=[refund, note], model=chat_model(server.url)))
    with Runner(db_url) as runner:
        runner.run(agent, "Refund order A-1", id="told")
        runner.send("told", "Please be brief.")
        runner.approve("told")
        with pytest.raises(Crash):
            runner.resume("told", agent=agent)
        crash(runner.engine, "told")
        result = runner.resume("told", agent=agent)
        rows = runner.journal("told")
        unread = runner.inbox("told")
    assert (result.stop_reason, result.output) == ("final", "Refunded A-1, briefly.")
    said = {"role": "user", "content": "Please be brief."}
    step2, step3 = (request.json["messages"] for request in server.requests[1:])
    assert step2[-2]["role"] == "tool" and step2[-1] == said
    assert step3.count(said) == 1 and step3[: len(step2)] == step2  # in its place, once
    assert [(row.kind, row.step) for row in rows if row.kind == "message"] == [("message", 2)]
    assert unread == [] and len(server.requests) == 3


def test_an_agent_as_tool_named_a_sub_agent_runs_as_a_child_run(
    db_url: str, server: FakeServer
) -> None:
    from tests.providers import sdk_trees

    sdk_trees.serve(chat_model(server.url))
    server.reply(openai_completion(calls=[("call_1", "research", '{"input": "Is tea ok?"}')]))
    server.reply(openai_completion("Tea is fine."))
    server.reply(openai_completion("The researcher says tea is fine."))
    with Runner(db_url) as runner:
        result = runner.run(sdk_trees.lead, "Should I drink tea?", id="lead")
        rows = runner.journal("lead")
        (child,) = [row for row in runner.list() if row.parent_id == "lead"]
        child_rows = runner.journal(child.id)
    assert (result.stop_reason, result.output) == ("final", "The researcher says tea is fine.")
    assert [(row.kind, row.tool) for row in rows if row.step == 1] == [
        ("action", "research"),
        ("wait", "research"),
        ("answer", "research"),
        ("observation", "research"),
    ]
    assert (child.agent_name, child.task, child.stop_reason) == (
        "researcher",
        "Is tea ok?",
        "final",
    )
    assert child.budgets["max_steps"] == 3 and child.budgets["max_tokens"] <= 10_000
    assert [row.kind for row in child_rows] == ["task", "final"]  # its request, journaled there
    shown = server.requests[2].json["messages"][-1]
    assert shown["role"] == "tool" and shown["content"] == "Tea is fine."
    assert len(server.requests) == 3


def test_a_handoff_to_a_sub_agent_runs_as_a_child_run_whose_answer_ends_the_run(
    db_url: str, server: FakeServer
) -> None:
    from tests.providers import sdk_trees

    sdk_trees.serve(chat_model(server.url))
    sdk_trees.LOOKED_UP.clear()
    server.reply(openai_completion(calls=[("call_1", "transfer_to_billing", "{}")]))
    server.reply(openai_completion(calls=[("call_2", "look_up", '{"order": "A-1"}')]))
    server.reply(openai_completion("Order A-1 is paid."))
    with Runner(db_url) as runner:
        result = runner.run(sdk_trees.triage, "Was order A-1 paid?", id="triage")
        rows = runner.journal("triage")
        (child,) = [row for row in runner.list() if row.parent_id == "triage"]
        child_rows = runner.journal(child.id)
        replayed = runner.replay("triage", agent=sdk_trees.triage)
    assert (result.stop_reason, result.output) == ("final", "Order A-1 is paid.")
    assert [(row.kind, row.tool) for row in rows] == [
        ("task", None),
        ("action", "transfer_to_billing"),
        ("wait", "transfer_to_billing"),
        ("answer", "transfer_to_billing"),
        ("observation", "transfer_to_billing"),
        ("final", None),
    ]
    assert (child.agent_name, child.stop_reason) == ("billing", "final")
    assert "Was order A-1 paid?" in child.task  # the conversation it takes over
    assert [(row.kind, row.tool) for row in child_rows] == [
        ("task", None),
        ("action", "look_up"),
        ("observation", "look_up"),
        ("final", None),
    ]
    assert sdk_trees.LOOKED_UP == ["A-1"] and len(server.requests) == 3
    assert replayed.agrees, replayed  # the handoff's call and the final after it


def test_the_trees_token_budget_stops_the_child_then_its_parent(
    db_url: str, server: FakeServer
) -> None:
    from tests.providers import sdk_trees

    sdk_trees.serve(chat_model(server.url))
    server.reply(openai_completion(calls=[("call_1", "ponder_it", '{"input": "tea"}')]))
    server.reply(openai_completion(calls=[("call_2", "ponder", '{"topic": "tea"}')]))
    server.reply(openai_completion(calls=[("call_3", "ponder", '{"topic": "more tea"}')]))
    with Runner(db_url) as runner:
        result = runner.run(sdk_trees.frugal, "Ponder tea.", id="frugal")
        tree = runner.tree("frugal")
    parent, (child,) = tree.row, [branch.row for branch in tree.children]
    assert child.budgets["max_tokens"] == 300 - 120  # what its parent had left
    assert (child.stop_reason, child.tokens) == ("token_budget", 240)
    assert (result.stop_reason, result.steps) == ("token_budget", 1)
    assert parent.tokens + parent.below_tokens == 360  # no request after the budget was spent
    assert len(server.requests) == 3


def test_failing_tools_stop_an_sdk_run_with_tool_errors(db_url: str, server: FakeServer) -> None:
    for n in range(3):
        server.reply(openai_completion(calls=[(f"call_{n}", "divide", f'{{"a": {n}}}')]))

    @function_tool
    def divide(a: int) -> float:
        """Divide by zero."""
        return a / 0

    shop = SdkAgent(name="shop", tools=[divide], model=chat_model(server.url))
    with Runner(db_url) as runner:
        result = runner.run(RunnerAgent(shop, max_consecutive_errors=1), TASK, id="errors")
        rows = runner.journal("errors")
    assert (result.stop_reason, result.steps) == ("tool_errors", 2)
    failed = [(row.content, row.is_error) for row in rows if row.kind == "observation"]
    assert failed == [("ZeroDivisionError: division by zero", True)] * 2
    shown = server.requests[1].json["messages"][-1]
    assert shown == {"role": "tool", "tool_call_id": "call_0", "content": failed[0][0]}


def test_an_sdk_runs_cost_is_its_models_price_and_max_cost_stops_it(
    db_url: str, server: FakeServer
) -> None:
    script(server)  # each response: 100 input and 20 output tokens of gpt-4.1-mini
    with Runner(db_url) as runner:
        result = runner.run(Calculator(server.url, max_cost=0.0001).agent, TASK, id="priced")
    assert (result.stop_reason, result.steps) == ("cost_budget", 2)
    assert result.cost == pytest.approx(2 * (100 * 0.4 + 20 * 1.6) / 1e6)
    assert len(server.requests) == 2


def test_an_sdk_agent_is_a_sub_agent_of_a_runner_agent_in_memory_too(server: FakeServer) -> None:
    """`RunnerAgent.as_tool()` (runner's own): in memory the child drives the SDK's loop
    inline, as a durable run's child run does."""
    from runner import run_agent
    from runner.testing import FunctionModel, call, final, tool_results, turns
    from tests.providers import sdk_trees

    def boss(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if turns(transcript) == 0:
            return call("research", task="Is tea ok?")
        return final("Boss: " + tool_results(transcript)[0]["content"])

    sdk_trees.serve(chat_model(server.url))
    server.reply(openai_completion("Tea is fine."))
    tools = {"research": sdk_trees.researcher.as_tool("research")}
    result = run_agent(FunctionModel(boss), tools, "Should I drink tea?")
    assert (result.stop_reason, result.output) == ("final", "Boss: Tea is fine.")


def test_runner_replay_rechecks_an_sdk_run_against_todays_code(
    db_url: str, server: FakeServer
) -> None:
    script(server)
    with Runner(db_url) as runner:
        runner.run(Calculator(server.url).agent, TASK, id="replayed")
        same = runner.replay("replayed", agent=Calculator(server.url).agent)
        bare = RunnerAgent(SdkAgent(name="bare", model=chat_model(server.url)))
        changed = runner.replay("replayed", agent=bare)
    assert same.agrees, same
    assert (changed.agrees, changed.step) == (False, 1)
    assert len(server.requests) == 3  # a replay asks no model


def test_an_sdk_agent_named_by_reference_is_wrapped_with_the_defaults(tmp_path: Any) -> None:
    from runner.core.agent import load_agent

    path = tmp_path / "plain_sdk_agent.py"
    path.write_text("from agents import Agent\nbot = Agent(name='bot')\n")
    loaded = load_agent(f"{path}:bot")
    assert isinstance(loaded, RunnerAgent) and loaded.name == "bot"
    assert loaded.ref == f"{path}:bot"  # a resume loads and wraps it the same way


def test_a_request_the_provider_refuses_stops_the_run_unretried(
    db_url: str, server: FakeServer
) -> None:
    refused = {"error": {"message": "bad request", "type": "invalid_request_error"}}
    server.reply(refused, status=400)
    server.reply(openai_completion("never asked"))
    with Runner(db_url) as runner:
        result = runner.run(Calculator(server.url).agent, TASK, id="refused")
    assert result.stop_reason == "model_error" and "400" in (result.error or "")
    assert len(server.requests) == 1


def test_two_as_tool_calls_of_one_step_start_two_child_runs(
    db_url: str, server: FakeServer
) -> None:
    """The SDK runs a step's calls at once: the run parks only once both children exist."""
    from tests.providers import sdk_trees

    sdk_trees.serve(chat_model(server.url))
    calls = [
        ("call_1", "research", '{"input": "Tea?"}'),
        ("call_2", "research", '{"input": "Coffee?"}'),
    ]
    server.reply(openai_completion(calls=calls))
    server.reply(openai_completion("Fine."))
    server.reply(openai_completion("Fine."))
    server.reply(openai_completion("Both are fine."))
    with Runner(db_url) as runner:
        result = runner.run(sdk_trees.lead, "Tea or coffee?", id="both")
        children = [row for row in runner.list() if row.parent_id == "both"]
    assert (result.stop_reason, result.output) == ("final", "Both are fine.")
    assert sorted((child.task, child.stop_reason) for child in children) == [
        ("Coffee?", "final"),
        ("Tea?", "final"),
    ]
