"""Acceptance: the `runner` command SIGKILLed inside an MCP call, then resumed, on SQLite
and PostgreSQL, over stdio and streamable HTTP; and the MCP server killed mid-call.

The ledger server (ledger_server.py) writes every call it receives, with the key and
attempt from its `_meta`, to a ledger outside runner's database. A read-only and an
idempotent tool's interrupted call runs again once, with the same key (attempt 2); a
destructive tool's is never run again: the model is told its outcome is unknown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner import run_agent
from runner.mcp import mcp_tools
from runner.testing import ScriptedModel, call, final, tool_results
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

from .conftest import SERVER, answers, free_port, ledger_lines

AGENTS = Path(__file__).with_name("agents.py")


@dataclass(frozen=True)
class Case:
    tool: str
    args: dict[str, Any]
    answer: str | None  # what the resumed run answers, None: OutcomeUnknown
    rerun: bool  # whether the interrupted call runs again (attempt 2, the same key)


CASES = [
    Case("lookup", {"item": "tea"}, "tea costs 5", rerun=True),  # readOnlyHint
    Case("put", {"item": "tea", "price": 7}, "tea now costs 7", rerun=True),  # idempotentHint
    Case("charge", {"amount": 5}, None, rerun=False),  # destructiveHint
]


def environment(db_url: str, ledger: Path, case: Case, url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "MCP_URL"))}
    env["RUNNER_DATABASE_URL"] = db_url
    env["MCP_HOLD"] = case.tool
    env["MCP_CALL"] = json.dumps(call(case.tool, **case.args))
    if url is not None:
        env["MCP_URL"] = url
    return env


def end_orphans(ledger: Path) -> None:
    """A stdio server whose client was killed may still hold its call: end it."""
    for line in ledger_lines(ledger):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(line["pid"], signal.SIGKILL)


def _pairs() -> list[object]:
    """Each case over each transport, each on one database: stdio on SQLite and HTTP on
    PostgreSQL for one case, the other way round for the next, so each case and each
    transport meets both databases. The database's part (the journal, the settlement) does
    not depend on the transport, and each case costs two `runner` processes and a server."""
    pairs: list[object] = []
    for n, case in enumerate(CASES):
        databases = ("sqlite", "postgres") if n % 2 == 0 else ("postgres", "sqlite")
        for transport, database in zip(("stdio", "http"), databases, strict=True):
            marks = [pytest.mark.postgres] if database == "postgres" else []
            name = f"{database}-{case.tool}-{transport}"
            pairs.append(pytest.param(case, transport, database, marks=marks, id=name))
    return pairs


@pytest.mark.parametrize(("case", "transport", "db_url"), _pairs(), indirect=["db_url"])
def test_killed_inside_an_mcp_call_then_resumed(
    case: Case,
    transport: str,
    db_url: str,
    ledger: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue("http_server") if transport == "http" else None
    env = environment(db_url, ledger, case, url)
    run_id = f"mcp-{case.tool}"
    try:
        process = start("run", f"{AGENTS}:agent", "sell tea", "--id", run_id, env=env, cwd=tmp_path)
        wait_for(
            lambda: (
                any(line["tool"] == case.tool for line in ledger_lines(ledger))
                or process.poll() is not None
            ),
            what=f"the {case.tool} call to reach the server",
        )
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate(timeout=scaled(60))
        assert process.returncode == KILLED, f"{process.returncode}\n{out}\n{err}"
        # The killed call's own server call may end now (over HTTP it completes: its
        # effect happened, and nobody recorded it).
        Path(env["MCP_RELEASE"]).touch()
        pending = journal(db_url, run_id)
        assert [row["kind"] for row in pending] == ["task", "tools", "action"]
        assert sorted(pending[1]["args"]) == ["charge", "lookup", "put", "refund"]

        resumed = run_command("resume", run_id, env=env, cwd=tmp_path, timeout=120)
        assert resumed.returncode == 0, described(resumed)
        calls = [line for line in ledger_lines(ledger) if line["tool"] == case.tool]
        key = f"{run_id}-1"
        rows = journal(db_url, run_id)
        observation = next(row for row in rows if row["kind"] == "observation")
        if case.rerun:
            assert [(c["key"], c["attempt"]) for c in calls] == [(key, 1), (key, 2)]
            assert all(c["args"] == case.args for c in calls)
            assert resumed.stdout == f"{case.answer}\n"
            assert (observation["attempt"], observation["is_error"]) == (2, False)
        else:
            assert [(c["key"], c["attempt"]) for c in calls] == [(key, 1)]  # never again
            assert observation["is_error"]
            assert observation["content"].startswith("OutcomeUnknown: charge was interrupted")
            assert resumed.stdout.startswith("OutcomeUnknown: charge was interrupted")
        assert run_row(db_url, run_id)["stop_reason"] == "final"
        assert [row["kind"] for row in rows] == ["task", "tools", "action", "observation", "final"]
    finally:
        Path(env["MCP_RELEASE"]).touch()
        if transport == "stdio":
            end_orphans(ledger)


def test_a_server_killed_mid_call_is_a_tool_error_and_the_next_call_starts_it_again(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_HOLD", "lookup")
    tools = mcp_tools([sys.executable, str(SERVER)], env=dict(os.environ))
    model = ScriptedModel(
        [call("lookup", item="tea"), call("lookup", item="milk"), lambda t: final("done")]
    )
    results: list[Any] = []
    running = threading.Thread(target=lambda: results.append(run_agent(model, tools, "prices")))
    running.start()
    wait_for(lambda: len(ledger_lines(ledger)) == 1, what="the first call to reach the server")
    first_server = ledger_lines(ledger)[0]["pid"]
    Path(os.environ["MCP_RELEASE"]).touch()  # the next call (a new server) is not held
    os.kill(first_server, signal.SIGKILL)
    running.join(scaled(120))
    assert not running.is_alive()
    (result,) = results
    killed, again = tool_results(result.transcript)
    assert killed["is_error"], killed
    assert killed["content"].startswith("MCPUnavailable: the MCP server "), killed
    assert "failed during the call" in killed["content"], killed
    assert (again["is_error"], again["content"]) == (False, "milk costs 5")
    second_server = ledger_lines(ledger)[1]["pid"]
    assert second_server != first_server


def test_an_http_server_killed_mid_call_is_a_tool_error_and_the_next_call_connects_again(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_HOLD", "lookup")
    port = free_port()

    def serve() -> subprocess.Popen[bytes]:
        command = [sys.executable, str(SERVER), "--http", str(port)]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: answers(port) or server.poll() is not None, what="the MCP server")
        assert server.poll() is None, "the MCP server exited"
        return server

    servers = [serve()]
    tools = mcp_tools(url=f"http://127.0.0.1:{port}/mcp")

    def again(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        # The model asks again once the server is back (a person restarted it, say).
        wait_for(lambda: len(servers) == 2 and answers(port), what="the server restarted")
        return call("lookup", item="milk")

    model = ScriptedModel([call("lookup", item="tea"), again, lambda t: final("done")])
    results: list[Any] = []
    running = threading.Thread(target=lambda: results.append(run_agent(model, tools, "prices")))
    running.start()
    try:
        wait_for(lambda: len(ledger_lines(ledger)) == 1, what="the first call to reach the server")
        Path(os.environ["MCP_RELEASE"]).touch()  # the next call is not held
        servers[0].kill()
        servers[0].wait()
        servers.append(serve())
        running.join(scaled(120))
        assert not running.is_alive()
    finally:
        for server in servers:
            server.kill()
            server.wait()
    (result,) = results
    assert result.stop_reason == "final"  # the run went on: the model saw the error
    killed, next_call = tool_results(result.transcript)
    assert killed["is_error"], killed
    assert killed["content"].startswith("MCPUnavailable: the MCP server http://127.0.0.1:")
    assert "failed during the call" in killed["content"], killed
    assert (next_call["is_error"], next_call["content"]) == (False, "milk costs 5")
    assert [line["args"]["item"] for line in ledger_lines(ledger)] == ["tea", "milk"]


@pytest.mark.parametrize(
    "case", [CASES[0], CASES[2]], ids=[CASES[0].tool, CASES[2].tool]
)  # read-only, destructive
def test_a_worker_killed_inside_an_mcp_call_is_taken_over_by_another(
    case: Case, db_url: str, ledger: Path, tmp_path: Path
) -> None:
    env = environment(db_url, ledger, case, None)
    run_id = f"worker-{case.tool}"
    submitted = run_command(
        "submit", f"{AGENTS}:agent", "sell tea", "--id", run_id, env=env, cwd=tmp_path, timeout=120
    )
    assert submitted.returncode == 0, described(submitted)
    # A short lease: the second worker may take the run over soon after the first dies.
    worker = ["worker", "--poll", "0.1", "--lease", "2"]
    first = start(*worker, env=env, cwd=tmp_path)
    second = None
    try:
        wait_for(
            lambda: (
                any(line["tool"] == case.tool for line in ledger_lines(ledger))
                or first.poll() is not None
            ),
            what=f"the worker's {case.tool} call to reach the server",
        )
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=scaled(60))
        assert first.returncode == KILLED
        Path(env["MCP_RELEASE"]).touch()
        second = start(*worker, env=env, cwd=tmp_path)
        wait_for(
            lambda: run_row(db_url, run_id)["status"] == "finished" or second.poll() is not None,
            what="the second worker to finish the run",
        )
        row = run_row(db_url, run_id)
        assert (row["status"], row["stop_reason"], row["resumes"]) == ("finished", "final", 1)
        calls = [(c["key"], c["attempt"]) for c in ledger_lines(ledger) if c["tool"] == case.tool]
        key = f"{run_id}-1"
        assert calls == ([(key, 1), (key, 2)] if case.rerun else [(key, 1)])
        if case.rerun:
            assert row["output"] == case.answer
        else:
            assert str(row["output"]).startswith("OutcomeUnknown: charge was interrupted")
    finally:
        Path(env["MCP_RELEASE"]).touch()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=scaled(60))
        end_orphans(ledger)


def test_a_graceful_stop_gives_an_mcp_call_up_and_the_next_worker_settles_it(
    db_url: str, ledger: Path, tmp_path: Path
) -> None:
    case = CASES[0]  # read-only: the call given up runs again on resume, with its key
    env = environment(db_url, ledger, case, None)
    run_id = "stopped-lookup"
    submitted = run_command(
        "submit", f"{AGENTS}:agent", "sell tea", "--id", run_id, env=env, cwd=tmp_path, timeout=120
    )
    assert submitted.returncode == 0, described(submitted)
    worker = ["worker", "--poll", "0.1"]
    first = start(*worker, env=env, cwd=tmp_path)
    second = None
    try:
        wait_for(
            lambda: len(ledger_lines(ledger)) == 1 or first.poll() is not None,
            what="the worker's lookup call to reach the server",
        )
        # SIGTERM: the worker stops gracefully. The call is held by the server (until the
        # release file exists, which it never does here): the stop must not wait for it.
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=scaled(60))
        assert first.returncode == 0, err
        assert f"run {run_id} released for another worker" in err, err
        assert run_row(db_url, run_id)["lease_owner"] is None
        assert [row["kind"] for row in journal(db_url, run_id)] == ["task", "tools", "action"]

        second = start(*worker, env=env, cwd=tmp_path)
        wait_for(
            lambda: run_row(db_url, run_id)["status"] == "finished" or second.poll() is not None,
            what="the second worker to finish the run",
        )
        row = run_row(db_url, run_id)
        assert (row["stop_reason"], row["output"]) == ("final", case.answer)
        calls = [(c["key"], c["attempt"]) for c in ledger_lines(ledger)]
        assert calls == [(f"{run_id}-1", 1), (f"{run_id}-1", 2)]
    finally:
        Path(env["MCP_RELEASE"]).touch()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=scaled(60))
        end_orphans(ledger)
