"""Durable runs through each adapter, on SQLite and PostgreSQL, crashed and resumed.

A resumed run rebuilds its transcript from the journal; the adapter must then send the
provider exactly the bytes an uncrashed run sends, or a crash would change the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text

from runner import Agent, Runner, tool
from runner.models import AnthropicMessages, OpenAIChat
from runner.models.adapter import Adapter
from tests.integration.support import Crash, crash
from tests.providers.conftest import KEY
from tests.providers.fake_servers import (
    FakeServer,
    anthropic_error,
    anthropic_message,
    openai_completion,
    openai_error,
    serving,
    text_block,
    tool_use,
)

TASK = "What is (2 + 3) * 7?"


def openai_script(server: FakeServer) -> None:
    server.reply(openai_completion("Adding.", calls=[("call_1", "add", '{"a": 2, "b": 3}')]))
    server.reply(openai_completion(calls=[("call_2", "multiply", '{"a": 5, "b": 7}')]))
    server.reply(openai_completion("35"))


def anthropic_script(server: FakeServer) -> None:
    server.reply(
        anthropic_message(text_block("Adding."), tool_use("toolu_1", "add", {"a": 2, "b": 3}))
    )
    server.reply(anthropic_message(tool_use("toolu_2", "multiply", {"a": 5, "b": 7})))
    server.reply(anthropic_message(text_block("35")))


def make_openai(url: str) -> Adapter:
    return OpenAIChat("gpt-4.1-mini", base_url=f"{url}/v1", api_key=KEY, price=(0.4, 1.6))


def make_anthropic(url: str) -> Adapter:
    return AnthropicMessages("claude-haiku-4-5", base_url=url, api_key=KEY, price=(1.0, 5.0))


PROVIDERS: dict[str, tuple[Callable[[str], Adapter], Callable[[FakeServer], None]]] = {
    "openai": (make_openai, openai_script),
    "anthropic": (make_anthropic, anthropic_script),
}


class Calculator:
    """The agent's tools; `multiply` can be told to die mid-call, as SIGKILL would."""

    def __init__(self, *, crash_in_multiply: bool = False) -> None:
        self.crash_in_multiply = crash_in_multiply
        self.calls: list[str] = []

        @tool(idempotent=True)
        def add(a: float, b: float) -> float:
            """Add two numbers."""
            self.calls.append("add")
            return a + b

        @tool(idempotent=True)
        def multiply(a: float, b: float) -> float:
            """Multiply two numbers."""
            self.calls.append("multiply")
            if self.crash_in_multiply:
                # Beside add in one step, die only once add is running too (it then ends).
                give_up = time.monotonic() + 10
                while "add" not in self.calls and time.monotonic() < give_up:
                    time.sleep(0.001)
                raise Crash
            return a * b

        self.tools = {"add": add, "multiply": multiply}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def agents() -> Iterator[Callable[[str, str, Calculator], Agent]]:
    """Agents over a provider's adapter pointed at a server; their clients closed after."""
    made: list[Agent] = []

    def make(provider: str, url: str, calculator: Calculator) -> Agent:
        adapter = PROVIDERS[provider][0](url)
        agent = Agent(adapter, calculator.tools, name=f"{provider}-calculator", max_steps=5)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        assert isinstance(agent.model, Adapter)
        agent.model.close()


def test_a_durable_run_reaches_the_final_answer(
    db_url: str, provider: str, server: FakeServer, agents: Any
) -> None:
    PROVIDERS[provider][1](server)
    agent = agents(provider, server.url, Calculator())
    with Runner(db_url) as runner:
        result = runner.run(agent, TASK, id=f"{provider}-final")
        assert (result.stop_reason, result.output, result.steps) == ("final", "35", 3)
        assert result.tokens == 3 * 120
        assert result.cost > 0
        assert runner.get(result.run_id or "").transcript == result.transcript
    assert [m.get("tool") for m in result.transcript if m["role"] == "assistant"] == [
        "add",
        "multiply",
        None,
    ]
    assert len(server.requests) == 3


def test_a_crash_then_resume_sends_exactly_the_requests_of_an_uncrashed_run(
    db_url: str, provider: str, agents: Any
) -> None:
    make_script = PROVIDERS[provider][1]
    with serving() as clean:
        make_script(clean)
        with Runner(db_url) as runner:
            expected = runner.run(agents(provider, clean.url, Calculator()), TASK, id="clean")
    with serving() as crashed:
        make_script(crashed)
        dying = Calculator(crash_in_multiply=True)
        with Runner(db_url) as runner:
            with pytest.raises(Crash):
                runner.run(agents(provider, crashed.url, dying), TASK, id="crashed")
            assert len(crashed.requests) == 2  # the worker died inside multiply
            crash(runner.engine, "crashed")
        calculator = Calculator()
        with Runner(db_url) as runner:
            result = runner.resume("crashed", agent=agents(provider, crashed.url, calculator))
        assert calculator.calls == ["multiply"]  # settled by running it again; add is journaled
    assert (result.stop_reason, result.output) == ("final", "35")
    assert result.transcript == expected.transcript
    assert [r.body for r in crashed.requests] == [r.body for r in clean.requests]


ERRORS = {
    "openai": openai_error(f"Incorrect API key provided: {KEY}", "invalid_request_error"),
    "anthropic": anthropic_error(f"invalid x-api-key: {KEY}", "authentication_error"),
}


def test_a_bad_key_stops_the_durable_run_and_no_key_reaches_the_database(
    db_url: str, provider: str, server: FakeServer, agents: Any
) -> None:
    server.reply(ERRORS[provider], status=401)
    agent = agents(provider, server.url, Calculator())
    with Runner(db_url) as runner:
        result = runner.run(agent, TASK, id="bad-key", model_retries=3)
        assert result.stop_reason == "model_error"
        assert f"{provider} API error 401" in (result.error or "")
        assert "[redacted]" in (result.error or "")
        with runner.engine.connect() as connection:
            stored = [
                *connection.execute(text("SELECT * FROM runs")).all(),
                *connection.execute(text("SELECT * FROM entries")).all(),
            ]
    assert stored and KEY not in repr(stored)
    assert "redacted" in repr(stored)
    assert len(server.requests) == 1


def openai_parallel_script(server: FakeServer) -> None:
    calls = [("call_1", "add", '{"a": 2, "b": 3}'), ("call_2", "multiply", '{"a": 5, "b": 7}')]
    server.reply(openai_completion("Both at once.", calls=calls))
    server.reply(openai_completion("5 and 35"))


def anthropic_parallel_script(server: FakeServer) -> None:
    server.reply(
        anthropic_message(
            text_block("Both at once."),
            tool_use("toolu_1", "add", {"a": 2, "b": 3}),
            tool_use("toolu_2", "multiply", {"a": 5, "b": 7}),
        )
    )
    server.reply(anthropic_message(text_block("5 and 35")))


PARALLEL = {"openai": openai_parallel_script, "anthropic": anthropic_parallel_script}


def test_parallel_calls_crashed_mid_batch_resume_with_the_requests_of_an_uncrashed_run(
    db_url: str, provider: str, agents: Any
) -> None:
    make_script = PARALLEL[provider]
    with serving() as clean:
        make_script(clean)
        with Runner(db_url) as runner:
            expected = runner.run(agents(provider, clean.url, Calculator()), TASK, id="clean")
    with serving() as crashed:
        make_script(crashed)
        dying = Calculator(crash_in_multiply=True)
        with Runner(db_url) as runner:
            with pytest.raises(Crash):
                runner.run(agents(provider, crashed.url, dying), TASK, id="crashed")
            assert sorted(dying.calls) == ["add", "multiply"]  # add ended and was journaled
            crash(runner.engine, "crashed")
        calculator = Calculator()
        with Runner(db_url) as runner:
            result = runner.resume("crashed", agent=agents(provider, crashed.url, calculator))
        assert calculator.calls == ["multiply"]  # only the unfinished call ran again
    assert (result.stop_reason, result.output, result.steps) == ("final", "5 and 35", 2)
    assert result.transcript == expected.transcript
    assert result.transcript[1]["text"] == "Both at once."
    assert [r.body for r in crashed.requests] == [r.body for r in clean.requests]
    ids = {"openai": ["call_1", "call_2"], "anthropic": ["toolu_1", "toolu_2"]}[provider]
    assert [m["id"] for m in result.transcript[2:4]] == ids
