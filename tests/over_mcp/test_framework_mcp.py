"""Acceptance: a Pydantic AI agent and an OpenAI Agents SDK agent whose MCP tools come
through their frameworks' own MCP clients (tests/acceptance/frameworks/mcp_*_agents.py), under
runner's RunnerAgent: the `runner` command SIGKILLed inside a read-only and a destructive MCP
call, then resumed, on SQLite and PostgreSQL; the tools' listing journaled, and a resume
after the server changed its tools stopped with `tools_changed`.

The ledger server (ledger_server.py) writes every call it receives, with the key and attempt
from its `_meta`, outside runner's database; the model is a chat-completions server in this
process, which calls the tool first and answers with what it returned.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")
pytest.importorskip("fastmcp")

from openai import AsyncOpenAI

from runner import Runner
from runner.core.calls import invoke
from tests.acceptance.harness import (
    KILLED,
    described,
    journal,
    run_command,
    run_row,
    start,
    wait_for,
)
from tests.conditions import scaled
from tests.providers.fake_servers import FakeServer, Reply, Request, openai_completion

from .conftest import SERVER, ledger_lines
from .test_mcp_crash import end_orphans, environment

FRAMEWORKS = Path(__file__).parents[1] / "acceptance" / "frameworks"
AGENTS = {
    "pydantic": str(FRAMEWORKS / "mcp_pydantic_agents.py"),
    "sdk": str(FRAMEWORKS / "mcp_sdk_agents.py"),
}


class ChatServer(FakeServer):
    """Calls `tool` with `args` first (then each of `more`, one a step), then answers with the
    first tool result it was shown."""

    def __init__(self, tool: str, args: dict[str, Any], *more: tuple[str, dict[str, Any]]):
        super().__init__()
        self.calls = [(tool, args), *more]

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
        done = [m for m in request.json["messages"] if m["role"] == "tool"]
        if len(done) < len(self.calls):
            tool, args = self.calls[len(done)]
            body = openai_completion(calls=[(f"call_{len(done) + 1}", tool, json.dumps(args))])
        else:
            body = openai_completion(f"Done: {done[0]['content']}")
        return Reply(200, json.dumps(body).encode())


@dataclass(frozen=True)
class Case:
    framework: str  # whose agent (AGENTS)
    tool: str
    args: dict[str, Any]
    rerun: bool  # read-only: run again with the same key; destructive: never
    transport: str  # each framework's client over both transports, across the cases
    agent: str = "agent"  # `trusting`: the user declares charge idempotent
    answer: str = "tea costs 5"  # what the call returns, when it runs again


CASES = [
    Case("pydantic", "lookup", {"item": "tea"}, True, "stdio"),
    Case("pydantic", "charge", {"amount": 5}, False, "http"),
    Case("sdk", "lookup", {"item": "tea"}, True, "http"),
    Case("sdk", "charge", {"amount": 5}, False, "stdio"),
]


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    servers: list[ChatServer] = []

    def made(tool: str, args: dict[str, Any], *more: tuple[str, dict[str, Any]]) -> ChatServer:
        server = ChatServer(tool, args, *more)
        server.start()
        servers.append(server)
        return server

    yield made  # type: ignore[misc]
    for server in servers:
        server.stop()


def resume(run_id: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_command("resume", run_id, env=env, cwd=cwd, timeout=120)


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.framework}-{c.tool}-{c.transport}" for c in CASES]
)
def test_a_framework_mcp_call_killed_mid_call_is_settled_by_its_annotations(
    case: Case,
    db_url: str,
    ledger: Path,
    tmp_path: Path,
    chat: Any,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue("http_server") if case.transport == "http" else None
    killed_and_resumed(case, db_url, ledger, tmp_path, chat, url)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("framework", sorted(AGENTS))
def test_the_user_overrides_what_the_annotations_say(
    framework: str, db_url: str, ledger: Path, tmp_path: Path, chat: Any
) -> None:
    case = Case(framework, "charge", {"amount": 5}, True, "stdio", "trusting", "charged 5")
    killed_and_resumed(case, db_url, ledger, tmp_path, chat, None)


def killed_and_resumed(
    case: Case, db_url: str, ledger: Path, tmp_path: Path, chat: Any, url: str | None
) -> None:
    """Run the case's agent, SIGKILL it inside the case's call, resume it, and check the
    call ran again with its key (or never), as the case says."""
    model = chat(case.tool, case.args)
    env = environment(db_url, ledger, _as_case(case), url)
    env["RUNNER_TEST_OPENAI_URL"] = model.url
    run_id = f"{case.framework}-{case.tool}"
    try:
        process = start("run", f"{AGENTS[case.framework]}:{case.agent}", "sell tea", "--id", run_id,
                        env=env, cwd=tmp_path)  # fmt: skip
        wait_for(
            lambda: (
                any(line["tool"] == case.tool for line in ledger_lines(ledger))
                or process.poll() is not None
            ),
            what=f"the {case.tool} call to reach the server",
        )
        process.kill()
        out, err = process.communicate(timeout=scaled(60))
        assert process.returncode == KILLED, f"{process.returncode}\n{out}\n{err}"
        Path(env["MCP_RELEASE"]).touch()
        pending = journal(db_url, run_id)
        assert [row["kind"] for row in pending] == ["task", "tools", "action"]
        assert sorted(pending[1]["args"]) == ["charge", "lookup", "put", "refund"]
        assert pending[1]["args"]["lookup"]["annotations"]["readOnlyHint"] is True

        resumed = resume(run_id, env, tmp_path)
        assert resumed.returncode == 0, described(resumed)
        key = f"{run_id}-1"
        calls = [(c["key"], c["attempt"]) for c in ledger_lines(ledger) if c["tool"] == case.tool]
        observation = next(row for row in journal(db_url, run_id) if row["kind"] == "observation")
        if case.rerun:
            assert calls == [(key, 1), (key, 2)]  # again, with the same key in `_meta`
            assert (observation["attempt"], observation["is_error"]) == (2, False)
            assert case.answer in observation["content"]
            assert resumed.stdout.startswith("Done: ") and case.answer in resumed.stdout
        else:
            assert calls == [(key, 1)]  # never run twice
            assert observation["is_error"]
            assert observation["content"].startswith("OutcomeUnknown: charge was interrupted")
            assert "OutcomeUnknown" in resumed.stdout
        assert run_row(db_url, run_id)["stop_reason"] == "final"
    finally:
        Path(env["MCP_RELEASE"]).touch()
        end_orphans(ledger)


def _as_case(case: Case) -> Any:
    """The case as test_mcp_crash.environment reads it (its tool and the call's arguments)."""
    from .test_mcp_crash import Case as Plain

    return Plain(case.tool, case.args, None, case.rerun)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("framework", sorted(AGENTS))
def test_a_resume_after_the_server_changed_its_tools_stops_naming_them(
    framework: str, db_url: str, ledger: Path, tmp_path: Path, chat: Any
) -> None:
    model = chat("lookup", {"item": "tea"})
    env = environment(db_url, ledger, _as_case(CASES[0]), None)
    env.pop("MCP_HOLD")
    env.update(RUNNER_TEST_OPENAI_URL=model.url, RUNNER_FAULT="after_action_commit@1")
    run_id = f"{framework}-changed"
    try:
        killed = run_command(
            "run", f"{AGENTS[framework]}:agent", "sell tea", "--id", run_id,
            env=env, cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert killed.returncode == KILLED, described(killed)
        del env["RUNNER_FAULT"]
        env["MCP_EXTRA_TOOL"] = "1"
        resumed = resume(run_id, env, tmp_path)
        assert resumed.returncode != 0, described(resumed)
        row = run_row(db_url, run_id)
        assert row["stop_reason"] == "tools_changed"
        assert "new: stock" in row["error"], row["error"]
        assert ledger_lines(ledger) == []  # no call went to the changed server
    finally:
        end_orphans(ledger)


def framework_agent(framework: str, client: AsyncOpenAI) -> Any:
    """The framework's agent over the ledger server on stdio, its model talking through
    `client`, made here (the agents' files read the environment once, when first imported)."""
    command, env = [sys.executable, str(SERVER)], dict(os.environ)
    if framework == "pydantic":
        from fastmcp.client.transports import StdioTransport
        from pydantic_ai import Agent
        from pydantic_ai.mcp import MCPToolset
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        from runner.integrations import pydantic_ai

        provider = OpenAIProvider(openai_client=client)
        # Retries above Pydantic AI's default of 1: the second failed call must not end it.
        toolset = MCPToolset(StdioTransport(command[0], command[1:], env=env), max_retries=3)
        model = OpenAIChatModel("gpt-4.1-mini", provider=provider)
        return pydantic_ai.RunnerAgent(Agent(model, toolsets=[toolset]), max_steps=5)
    from agents import Agent as SdkAgent
    from agents import OpenAIChatCompletionsModel
    from agents.mcp import MCPServerStdio

    from runner.integrations import openai_agents

    server = MCPServerStdio(params={"command": command[0], "args": command[1:], "env": env})
    model = OpenAIChatCompletionsModel("gpt-4.1-mini", client)
    agent = SdkAgent("shop", mcp_servers=[server], model=model)
    return openai_agents.RunnerAgent(agent, max_steps=5)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("framework", sorted(AGENTS))
def test_a_server_killed_mid_call_is_an_error_the_model_sees_not_a_crash(
    framework: str, db_url: str, ledger: Path, chat: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_HOLD", "lookup")
    model = chat("lookup", {"item": "tea"}, ("lookup", {"item": "milk"}))
    client = AsyncOpenAI(base_url=f"{model.url}/v1", api_key="test-key-3f9c1b7d")
    agent = framework_agent(framework, client)
    results: list[Any] = []
    with Runner(db_url) as runner:
        running = threading.Thread(target=lambda: results.append(runner.run(agent, "prices")))
        running.start()
        try:
            wait_for(lambda: len(ledger_lines(ledger)) == 1, what="the first call at the server")
            Path(os.environ["MCP_RELEASE"]).touch()  # the next call is not held
            os.kill(ledger_lines(ledger)[0]["pid"], signal.SIGKILL)
            running.join(scaled(120))
        finally:
            Path(os.environ["MCP_RELEASE"]).touch()
            end_orphans(ledger)
            # Closed on the loop its connections were made on (runner's own).
            invoke(client.close, (), {}, None)
        assert not running.is_alive()
        (result,) = results
        assert result.stop_reason == "final", result.error
        killed, after = [e for e in runner.journal(result.run_id) if e.kind == "observation"]
    assert killed.is_error and "Connection closed" in str(killed.content), killed
    if framework == "sdk":
        # The next turn connects again (a new server process), and the call goes through.
        assert (after.is_error, after.content) == (False, "milk costs 5")
        first, second = ledger_lines(ledger)
        assert second["args"] == {"item": "milk"} and second["pid"] != first["pid"]
    else:
        # Pydantic AI's client keeps the broken session for the rest of the run.
        assert after.is_error and "Connection closed" in str(after.content), after
