"""`runner mcp serve` driven by the official MCP client, over stdio and streamable HTTP:
a run submitted through MCP, waiting for approval, approved through MCP, finished; its
transcript as a resource; history read-only; and over HTTP, the token and the Origin check.
A real `runner worker` runs the runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from runner.errors import MCPUnavailable
from runner.mcp import mcp_tools
from tests.acceptance.harness import RUNNER
from tests.conditions import wait_until

from .conftest import answers, free_port

AGENTS = Path(__file__).with_name("agents.py")
TOKEN = "s3cret-token"


def environment(db_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    env["RUNNER_DATABASE_URL"] = db_url
    return env


@pytest.fixture
def worker(db_url: str, tmp_path: Path) -> Iterator[None]:
    process = subprocess.Popen(
        [str(RUNNER), "worker", "--poll", "0.1"],
        env=environment(db_url),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def http_serve(db_url: str, tmp_path: Path) -> Iterator[str]:
    """`runner mcp serve --http` with a token: its URL."""
    port = free_port()
    process = subprocess.Popen(
        [str(RUNNER), "mcp", "serve", "--http", f"127.0.0.1:{port}", "--token", TOKEN],
        env=environment(db_url),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: answers(port) or process.poll() is not None, what="runner mcp serve")
        assert process.poll() is None, "runner mcp serve exited"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@asynccontextmanager
async def connected(
    transport: str, db_url: str, tmp_path: Path, url: str | None
) -> AsyncIterator[Client]:
    if transport == "stdio":
        parameters = StdioServerParameters(
            command=str(RUNNER), args=["mcp", "serve"], env=environment(db_url), cwd=tmp_path
        )
        async with Client(parameters) as client:
            yield client
        return
    assert url is not None
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    document: dict[str, Any] = result.structured_content
    return document


async def until_state(client: Client, run_id: str, *states: str) -> dict[str, Any]:
    """wait_for_run, asked again while the run is in none of `states`."""
    with anyio.fail_after(120):
        while True:
            run = structured(
                await client.call_tool("wait_for_run", {"run_id": run_id, "wait_seconds": 5})
            )
            if run["state"] in states:
                return run


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_mcp_client_submits_a_run_approves_its_call_and_reads_its_result(
    transport: str, db_url: str, tmp_path: Path, worker: None, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("http_serve") if transport == "http" else None

    async def drive() -> None:
        async with connected(transport, db_url, tmp_path, url) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {"submit_run", "get_run", "list_runs", "wait_for_run", "run_events",
                    "approve_call", "deny_call", "reply_to_run", "cancel_run", "send_message",
                    "query_history"} <= set(listed)  # fmt: skip
            assert listed["get_run"].annotations.read_only_hint is True
            assert listed["cancel_run"].annotations.destructive_hint is True

            submitted = structured(await client.call_tool(
                "submit_run",
                {"agent": f"{AGENTS}:approving", "task": "pay 3", "idempotency_key": "order-1"},
            ))  # fmt: skip
            run_id = submitted["id"]
            again = structured(await client.call_tool(
                "submit_run",
                {"agent": f"{AGENTS}:approving", "task": "pay 3", "idempotency_key": "order-1"},
            ))  # fmt: skip
            assert again["id"] == run_id  # the same key: the same run, not a second one

            waiting = await until_state(client, run_id, "waiting", "finished")
            assert waiting["state"] == "waiting", waiting
            assert waiting["waiting"]["tool"] == "pay"
            assert waiting["waiting"]["args"] == {"amount": 3}

            approved = structured(await client.call_tool(
                "approve_call", {"run_id": run_id, "by": "mcp-test"}
            ))  # fmt: skip
            assert approved["answer"] == "approved"
            finished = await until_state(client, run_id, "finished")
            assert (finished["stop_reason"], finished["output"]) == ("final", "paid 3")

            events = structured(await client.call_tool("run_events", {"run_id": run_id}))
            kinds = [event["kind"] for event in events["events"]]
            assert kinds[0] == "task" and "answer" in kinds and kinds[-1] == "final"
            later = structured(await client.call_tool(
                "run_events", {"run_id": run_id, "after": events["position"]}
            ))  # fmt: skip
            assert later["events"] == [] and later["position"] == events["position"]

            listed_runs = structured(await client.call_tool("list_runs", {"state": "finished"}))
            assert [run["id"] for run in listed_runs["runs"]] == [run_id]

            rows = structured(await client.call_tool(
                "query_history", {"sql": "SELECT id, stop_reason FROM runs"}
            ))  # fmt: skip
            assert rows["rows"] == [[run_id, "final"]]
            refused = await client.call_tool("query_history", {"sql": "DELETE FROM runs"})
            assert refused.is_error
            still = structured(await client.call_tool("get_run", {"run_id": run_id}))
            assert still["state"] == "finished"

            missing = await client.call_tool("get_run", {"run_id": "no-such-run"})
            assert missing.is_error and "no-such-run" in missing.content[0].text

            transcript = await client.read_resource(f"runner://runs/{run_id}/transcript")
            messages = json.loads(transcript.contents[0].text)
            assert messages[0] == {"role": "user", "content": "pay 3"}
            assert messages[-1] == {"role": "assistant", "content": "paid 3"}

    anyio.run(drive)


def test_over_http_a_request_without_the_token_or_from_another_origin_is_refused(
    http_serve: str,
) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    plain = httpx2.post(http_serve, json=hello)
    assert plain.status_code == 401
    wrong = httpx2.post(http_serve, json=hello, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    elsewhere = httpx2.post(
        http_serve,
        json=hello,
        headers={"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"},
    )
    assert elsewhere.status_code == 403
    assert elsewhere.json() == {"error": "refused: a request from another origin"}


def test_serving_http_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(RUNNER), "mcp", "serve", "--http", "0.0.0.0:8999"],
        env=environment(f"sqlite:///{tmp_path / 'r.db'}"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "not a loopback address: give --token" in done.stderr
    assert "Traceback" not in done.stderr
    bad = subprocess.run(
        [str(RUNNER), "mcp", "serve", "--http", "nowhere"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "is not HOST:PORT" in bad.stderr


def test_mcp_tools_reach_runner_mcp_serve_with_its_token_in_headers(http_serve: str) -> None:
    tools = mcp_tools(
        url=http_serve, headers={"Authorization": f"Bearer {TOKEN}"}, approval="destructive"
    )
    # runner's own tools, settled by the annotations runner gives them.
    assert tools["get_run"].idempotent and not tools["get_run"].approval
    assert not tools["submit_run"].idempotent and not tools["submit_run"].approval
    assert tools["cancel_run"].approval  # destructive: asks a person first
    with pytest.raises(MCPUnavailable, match=f"the MCP server {http_serve} could not be reached"):
        mcp_tools(url=http_serve)  # no token
