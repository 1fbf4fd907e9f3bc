"""Fixtures for the MCP tests: the ledger server over stdio, or over streamable HTTP as a
subprocess of its own on a free port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conditions import wait_until

pytest.importorskip("mcp")

SERVER = Path(__file__).with_name("ledger_server.py")


@pytest.fixture(autouse=True)
def sessions_closed() -> Iterator[None]:
    """Each test's MCP sessions end with it (their stdio servers with them)."""
    yield
    from runner.mcp import close_sessions

    close_sessions()


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server's ledger file, named in this process's environment (a stdio server
    started from here inherits it)."""
    path = tmp_path / "mcp-ledger.jsonl"
    monkeypatch.setenv("MCP_LEDGER", str(path))
    monkeypatch.setenv("MCP_RELEASE", str(tmp_path / "release"))
    return path


def ledger_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def http_server(ledger: Path) -> Iterator[str]:
    """The ledger server over streamable HTTP: its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: answers(port) or process.poll() is not None, what="the MCP server")
        assert process.poll() is None, "the MCP server exited"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, ledger: Path) -> dict[str, Any]:
    """mcp_tools' arguments for the ledger server, over each transport."""
    if request.param == "stdio":
        return {"command": [sys.executable, str(SERVER)], "env": dict(os.environ)}
    return {"url": request.getfixturevalue("http_server")}
