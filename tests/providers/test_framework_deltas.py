"""Token deltas of a framework's agent (`RunnerAgent(..., stream=True)`), for Pydantic AI and
the OpenAI Agents SDK, on SQLite and PostgreSQL: each model request goes through the
framework's streaming path to the local chat-completions server; a follower reads the pieces
while the stream is held halfway, the journal has nothing of the call until it ends, and the
rows it then records are those of the same run unstreamed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from openai import AsyncOpenAI

from runner import DeltaEvent, Event, Runner
from runner.core.agent import Agent
from runner.core.calls import invoke
from tests.conditions import wait_until
from tests.providers.conftest import KEY
from tests.providers.fake_servers import FakeServer, openai_completion
from tests.providers.fake_streams import openai_events

WAIT = 60.0
TASK = "What is 2 + 3?"

_clients: list[AsyncOpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        invoke(_clients.pop().close, (), {}, None)


def _client(url: str) -> AsyncOpenAI:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY)
    _clients.append(client)
    return client


def pydantic_agent(url: str, stream: bool) -> Agent:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from runner.integrations.pydantic_ai import RunnerAgent

    model = OpenAIChatModel("gpt-4.1-mini", provider=OpenAIProvider(openai_client=_client(url)))
    agent = PydanticAgent(model, name="adder")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return RunnerAgent(agent, stream=stream, max_steps=4)


def sdk_agent(url: str, stream: bool) -> Agent:
    from agents import Agent as SdkAgent
    from agents import OpenAIChatCompletionsModel, function_tool

    from runner.integrations.openai_agents import RunnerAgent

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    model = OpenAIChatCompletionsModel("gpt-4.1-mini", _client(url))
    agent = SdkAgent(name="adder", instructions="Add.", tools=[add], model=model)
    return RunnerAgent(agent, stream=stream, max_steps=4)


MAKERS: dict[str, Callable[[str, bool], Agent]] = {"pydantic_ai": pydantic_agent, "sdk": sdk_agent}


def _rows(runner: Runner, run_id: str) -> list[tuple[Any, ...]]:
    return [
        (str(e.kind), e.step, e.content, e.tool, e.args, e.call_id, e.counters)
        for e, _ in runner.store.load_entries(run_id)
    ]


@pytest.mark.parametrize("framework", sorted(MAKERS))
def test_a_streamed_framework_run_is_followed_live_and_journals_what_an_unstreamed_one_does(
    server: FakeServer, db_url: str, framework: str
) -> None:
    make = MAKERS[framework]
    first = openai_completion("Adding.", calls=[("call_1", "add", '{"a": 2, "b": 3}')])
    last = openai_completion("The sum is 5.")
    hold = threading.Event()
    server.reply(first).reply(last)  # the run that does not stream
    server.stream(openai_events(first, size=3), hold=hold, hold_after=4)
    server.stream(openai_events(last, size=3))
    with Runner(db_url) as runner:
        plain = runner.run(make(server.url, False), TASK, id="plain")
        done = threading.Thread(
            target=runner.run, args=(make(server.url, True), TASK), kwargs={"id": "live"}
        )
        done.start()
        wait_until(lambda: runner.store.deltas_after("live", 0, 100), what="the first deltas")
        seen: list[Event | DeltaEvent] = []
        stream = runner.events("live", follow=True, deltas=True)
        follower = threading.Thread(target=lambda: seen.extend(stream))
        follower.start()
        wait_until(lambda: any(e.ephemeral for e in seen), what="a delta followed")
        # Halfway through the stream: the journal has the task, nothing of the call.
        assert [str(e.kind) for e, _ in runner.store.load_entries("live")] == ["task"]
        hold.set()
        done.join(WAIT)
        follower.join(WAIT)
        assert runner.get("live").output == plain.output == "The sum is 5."
        assert _rows(runner, "live") == _rows(runner, "plain")
        kinds = [e.kind if isinstance(e, DeltaEvent) else str(e.entry.kind) for e in seen]
        assert "delta" in kinds[: kinds.index("action")] and kinds[-1] == "final"
        pieces = [e.delta for e in seen if isinstance(e, DeltaEvent) and e.delta.step == 1]
        assert "Adding.".startswith("".join(d.text for d in pieces if d.part == "text"))
        assert [d.ordinal for d in pieces] == sorted(d.ordinal for d in pieces)
        wait_until(lambda: not runner.store.deltas_after("live", 0, 100), what="no delta left")
    # The streamed requests went the framework's streaming way.
    assert [bool(body.get("stream")) for body in server.bodies] == [False, False, True, True]
