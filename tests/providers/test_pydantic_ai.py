"""Pydantic AI agents under `RunnerAgent`, on SQLite and PostgreSQL: the real pydantic-ai
OpenAI model class over HTTP to the local chat-completions server, crashed and resumed.

A resumed run replays the agent's code from the start, fed the journal's responses and tool
outcomes: the model is asked only for what the journal lacks, a journaled tool never runs
again, and the requests it sends are byte for byte an uncrashed run's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from openai import AsyncOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from runner import Runner
from runner.core.calls import invoke
from runner.integrations.pydantic_ai import RunnerAgent, durable
from tests.integration.support import Crash, crash
from tests.providers.conftest import KEY
from tests.providers.fake_servers import FakeServer, openai_completion, serving

TASK = "What is (2 + 3) * 7?"

_clients: list[AsyncOpenAI] = []


def openai_model(url: str) -> OpenAIChatModel:
    """pydantic-ai's OpenAI model over its own client, pointed at the local server."""
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY)
    _clients.append(client)
    return OpenAIChatModel("gpt-4.1-mini", provider=OpenAIProvider(openai_client=client))


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Each client closed on the loop its connections were made on (runner's own)."""
    yield
    while _clients:
        invoke(_clients.pop().close, (), {}, None)


def script(server: FakeServer) -> None:
    server.reply(openai_completion("Adding.", calls=[("call_1", "add", '{"a": 2, "b": 3}')]))
    server.reply(openai_completion(calls=[("call_2", "multiply", '{"a": 5, "b": 7}')]))
    server.reply(openai_completion("35"))


class Calculator:
    """A Pydantic AI agent with two tools, counting their calls; `multiply` can be told to
    die mid-call (as SIGKILL would) and is idempotent only when told."""

    def __init__(
        self, url: str, *, crash_in: str | None = None, idempotent: bool = True, **budgets: Any
    ) -> None:
        self.calls: list[str] = []
        agent = PydanticAgent(openai_model(url), name="calculator", instructions="Use the tools.")

        @agent.tool_plain
        @durable(idempotent=True)
        def add(a: float, b: float) -> float:
            """Add two numbers."""
            return self.call("add", a + b)

        @agent.tool_plain
        def multiply(a: float, b: float) -> float:
            """Multiply two numbers."""
            return self.call("multiply", a * b)

        self.crash_in = crash_in
        self.agent = RunnerAgent(
            agent, idempotent={"multiply"} if idempotent else (), **{"max_steps": 5, **budgets}
        )

    def call(self, name: str, result: float) -> float:
        self.calls.append(name)
        if name == self.crash_in:
            raise Crash
        return result


def test_a_durable_run_journals_each_request_and_call(db_url: str, server: FakeServer) -> None:
    script(server)
    calculator = Calculator(server.url)
    with Runner(db_url) as runner:
        result = runner.run(calculator.agent, TASK, id="pydantic-final")
        rows = runner.journal("pydantic-final")
    assert (result.stop_reason, result.output, result.steps) == ("final", "35", 3)
    assert result.tokens == 3 * 120
    # Priced by Pydantic AI's table: 100 in at $0.4/M and 20 out at $1.6/M, three times.
    assert result.cost == pytest.approx(3 * (100 * 0.4 + 20 * 1.6) / 1e6)
    assert calculator.calls == ["add", "multiply"]
    assert len(server.requests) == 3
    kinds = [(row.kind, row.step, row.tool, row.idempotency_key) for row in rows]
    assert kinds == [
        ("task", 0, None, None),
        ("action", 1, "add", "pydantic-final-1"),
        ("observation", 1, "add", "pydantic-final-1"),
        ("action", 2, "multiply", "pydantic-final-2"),
        ("observation", 2, "multiply", "pydantic-final-2"),
        ("final", 3, None, None),
    ]
    assert [m.get("tool") for m in result.transcript if m["role"] == "assistant"] == [
        "add",
        "multiply",
        None,
    ]


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_a_crash_mid_tool_resumes_without_asking_or_running_twice(
    db_url: str, idempotent: bool
) -> None:
    with serving() as clean:
        script(clean)
        with Runner(db_url) as runner:
            expected = runner.run(Calculator(clean.url).agent, TASK, id="clean")
    with serving() as crashed:
        script(crashed)
        if not idempotent:
            # The model is shown that multiply's outcome is unknown, and answers anyway.
            crashed.script.pop()
            crashed.reply(openai_completion("35"))
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
        # add's outcome was journaled: it never runs again; neither do the two responses.
        assert len(crashed.requests) == 3
    multiply = [row for row in rows if row.kind == "observation" and row.tool == "multiply"]
    assert [(row.attempt, row.is_error) for row in multiply] == [(2, not idempotent)]
    assert (result.stop_reason, result.output) == ("final", "35")
    if idempotent:
        assert calculator.calls == ["multiply"]  # run again, with the same key
        assert result.transcript == expected.transcript
        for got, want in zip(crashed.requests, clean.requests, strict=True):
            assert got.json == want.json
    else:
        assert calculator.calls == []
        assert str(multiply[0].content).startswith("OutcomeUnknown: multiply was interrupted")
        sent = crashed.requests[2].json["messages"][-1]
        assert sent["role"] == "tool" and "OutcomeUnknown" in sent["content"]


def test_a_crash_after_a_response_is_journaled_never_asks_for_it_again(db_url: str) -> None:
    with serving() as server:
        script(server)
        dying = Calculator(server.url, crash_in="add")
        with Runner(db_url) as runner:
            with pytest.raises(Crash):
                runner.run(dying.agent, TASK, id="early")
            crash(runner.engine, "early")
        calculator = Calculator(server.url)
        with Runner(db_url) as runner:
            result = runner.resume("early", agent=calculator.agent)
        assert len(server.requests) == 3
    assert calculator.calls == ["add", "multiply"]  # add is idempotent: run again
    assert (result.stop_reason, result.output) == ("final", "35")


def test_a_resume_whose_agent_changed_stops_as_diverged(db_url: str) -> None:
    with serving() as server:
        script(server)
        dying = Calculator(server.url, crash_in="multiply")
        with Runner(db_url) as runner:
            with pytest.raises(Crash):
                runner.run(dying.agent, TASK, id="changed")
            crash(runner.engine, "changed")
        # The agent now answers at once, with no tool: the journal says it called add.
        bare = RunnerAgent(PydanticAgent(openai_model(server.url), output_type=int))
        with Runner(db_url) as runner:
            result = runner.resume("changed", agent=bare)
    assert result.stop_reason == "diverged"
    assert "diverged from the journal" in (result.error or "")


Budgeted = Callable[..., Any]


@pytest.mark.parametrize(
    ("budgets", "reason", "steps"),
    [
        ({"max_steps": 2}, "max_steps", 2),
        ({"max_tokens": 200}, "token_budget", 2),
        ({"max_cost": 0.0001}, "cost_budget", 2),
    ],
)
def test_runner_budgets_stop_a_pydantic_run(
    db_url: str, server: FakeServer, budgets: dict[str, Any], reason: str, steps: int
) -> None:
    script(server)
    calculator = Calculator(server.url, **budgets)
    with Runner(db_url) as runner:
        result = runner.run(calculator.agent, TASK, id="budget")
    assert (result.stop_reason, result.steps) == (reason, steps)
    assert len(server.requests) == steps


def test_a_tool_that_needs_approval_parks_the_run_until_a_person_answers(
    db_url: str, server: FakeServer
) -> None:
    server.reply(openai_completion(calls=[("call_1", "refund", '{"order": "A-1"}')]))
    server.reply(openai_completion("Refunded A-1."))
    refunds: list[str] = []
    shop = PydanticAgent(openai_model(server.url), name="shop")

    @shop.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        refunds.append(order)
        return f"refunded {order}"

    agent = RunnerAgent(shop)
    with Runner(db_url) as runner:
        parked = runner.run(agent, "Refund order A-1", id="approve")
        assert parked.status == "waiting" and refunds == []
        wait = runner.waiting_for("approve")
        assert wait is not None and (wait.tool, wait.args) == ("refund", {"order": "A-1"})
        runner.approve("approve", call=wait.call)
        result = runner.resume("approve", agent=agent)
    assert (result.stop_reason, result.output) == ("final", "Refunded A-1.")
    assert refunds == ["A-1"]
    assert len(server.requests) == 2


def test_a_denied_call_never_runs_and_the_model_is_shown_why(
    db_url: str, server: FakeServer
) -> None:
    server.reply(openai_completion(calls=[("call_1", "refund", '{"order": "A-1"}')]))
    server.reply(openai_completion("I could not refund it."))
    refunds: list[str] = []
    shop = PydanticAgent(openai_model(server.url), name="shop")

    @shop.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        refunds.append(order)
        return f"refunded {order}"

    agent = RunnerAgent(shop)
    with Runner(db_url) as runner:
        runner.run(agent, "Refund order A-1", id="deny")
        runner.deny("deny", reason="over the limit")
        result = runner.resume("deny", agent=agent)
    assert result.stop_reason == "final" and refunds == []
    sent = server.requests[1].json["messages"][-1]
    assert sent["role"] == "tool" and "Denied: over the limit" in sent["content"]


def test_a_pydantic_agent_named_by_reference_is_wrapped_with_the_defaults(
    tmp_path: Any,
) -> None:
    from runner.core.agent import load_agent

    path = tmp_path / "plain_agent.py"
    path.write_text(
        "from pydantic_ai import Agent\n"
        "from pydantic_ai.models.test import TestModel\n"
        "bot = Agent(TestModel(), name='bot')\n"
    )
    loaded = load_agent(f"{path}:bot")
    assert isinstance(loaded, RunnerAgent) and loaded.name == "bot"
    assert loaded.ref == f"{path}:bot"  # a resume loads and wraps it the same way


def test_a_delegated_agent_runs_as_a_child_run_inside_the_trees_budget(db_url: str) -> None:
    from tests.providers import pydantic_trees

    pydantic_trees.ASKED.clear()
    with Runner(db_url) as runner:
        result = runner.run(pydantic_trees.lead, "Should I drink coffee?", id="tree")
        rows = runner.journal("tree")
        children = [row for row in runner.list() if row.parent_id == "tree"]
    assert (result.stop_reason, result.output) == (
        "final",
        "Research says: coffee is fine in moderation",
    )
    assert pydantic_trees.ASKED == ["Is coffee healthy?"]  # asked once, in the child
    assert [(row.kind, row.tool) for row in rows if row.step == 1] == [
        ("action", "research"),
        ("wait", "research"),
        ("answer", "research"),
        ("observation", "research"),
    ]
    assert len(children) == 1
    child = children[0]
    assert (child.agent_name, child.stop_reason, child.task) == (
        "researcher",
        "final",
        "Is coffee healthy?",
    )
    assert child.budgets["max_steps"] == 3  # its own, under what its parent had left
    assert child.budgets["max_tokens"] <= 10_000


def test_a_repeated_call_stops_the_run_before_it_runs_again(
    db_url: str, server: FakeServer
) -> None:
    for _ in range(3):
        server.reply(openai_completion(calls=[("call_x", "add", '{"a": 2, "b": 3}')]))
    calculator = Calculator(server.url, max_repeats=1)
    with Runner(db_url) as runner:
        result = runner.run(calculator.agent, TASK, id="repeats")
        rows = runner.journal("repeats")
    assert (result.stop_reason, result.steps) == ("repeated_call", 2)
    assert calculator.calls == ["add"]  # the repeat was refused, never run
    assert [row.kind for row in rows if row.step == 2] == ["refused"]


def test_failing_tools_stop_the_run_with_tool_errors(db_url: str, server: FakeServer) -> None:
    for n in range(4):
        server.reply(openai_completion(calls=[(f"call_{n}", "divide", f'{{"a": {n}}}')]))
    shop = PydanticAgent(openai_model(server.url), retries=5)

    @shop.tool_plain
    def divide(a: int) -> float:
        """Divide by zero."""
        return a / 0

    with Runner(db_url) as runner:
        result = runner.run(RunnerAgent(shop, max_consecutive_errors=1), TASK, id="errors")
        rows = runner.journal("errors")
    assert (result.stop_reason, result.steps) == ("tool_errors", 2)
    seen = [row.content for row in rows if row.kind == "observation"]
    assert seen == ["ZeroDivisionError: division by zero"] * 2
    shown = server.requests[1].json["messages"][-1]
    assert "ZeroDivisionError: division by zero" in shown["content"]


def test_a_cancel_stops_the_run_before_its_next_request(db_url: str, server: FakeServer) -> None:
    script(server)
    shop = PydanticAgent(openai_model(server.url))

    @shop.tool_plain
    def add(a: float, b: float) -> float:
        """Add two numbers, and cancel the run (as `runner cancel` would, meanwhile)."""
        with Runner(db_url) as other:
            other.cancel("cancelled")
        return a + b

    with Runner(db_url) as runner:
        result = runner.run(RunnerAgent(shop), TASK, id="cancelled")
    assert (result.stop_reason, result.steps) == ("cancelled", 1)
    assert len(server.requests) == 1


def test_a_message_sent_to_a_pydantic_run_is_a_user_turn_before_its_next_request(
    db_url: str, server: FakeServer
) -> None:
    server.reply(openai_completion(calls=[("call_1", "refund", '{"order": "A-1"}')]))
    server.reply(openai_completion("Refunded A-1, briefly."))
    shop = PydanticAgent(openai_model(server.url), name="shop")

    @shop.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    agent = RunnerAgent(shop)
    with Runner(db_url) as runner:
        runner.run(agent, "Refund order A-1", id="told")
        runner.send("told", "Please be brief.")
        runner.approve("told")
        result = runner.resume("told", agent=agent)
        rows = runner.journal("told")
    assert result.output == "Refunded A-1, briefly."
    sent = server.requests[1].json["messages"]
    assert sent[-2]["role"] == "tool" and sent[-1] == {
        "role": "user",
        "content": "Please be brief.",
    }
    assert [(row.kind, row.step) for row in rows if row.kind == "message"] == [("message", 2)]
    assert {"role": "user", "content": "Please be brief."} in result.transcript


def test_runner_replay_rechecks_a_pydantic_run_against_todays_code(
    db_url: str, server: FakeServer
) -> None:
    script(server)
    with Runner(db_url) as runner:
        runner.run(Calculator(server.url).agent, TASK, id="replayed")
        same = runner.replay("replayed", agent=Calculator(server.url).agent)
        changed = runner.replay(
            "replayed", agent=RunnerAgent(PydanticAgent(openai_model(server.url)))
        )
    assert same.agrees, same
    assert not changed.agrees
    assert len(server.requests) == 3  # a replay asks no model
