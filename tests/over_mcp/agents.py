"""Agents for the MCP tests: a scripted model that calls one tool of the ledger server
(`MCP_CALL`, a JSON action) and answers with what it returned. The server is the stdio
command, or `MCP_URL` when set (streamable HTTP)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from runner import Agent, tool
from runner.mcp import mcp_tools
from runner.testing import ScriptedModel, call, final, tool_results

SERVER = Path(__file__).with_name("ledger_server.py")


def answer(transcript: list[dict[str, object]]) -> dict[str, object]:
    return final(tool_results(transcript)[-1]["content"])


def server_tools(**options: object) -> dict[str, object]:
    url = os.environ.get("MCP_URL")
    if url:
        return mcp_tools(url=url, **options)  # type: ignore[arg-type]
    return mcp_tools([sys.executable, str(SERVER)], env=dict(os.environ), **options)  # type: ignore[arg-type]


def agent() -> Agent:
    move = json.loads(os.environ["MCP_CALL"])
    return Agent(ScriptedModel([move, answer]), server_tools(), max_steps=4)


@tool(approval=True)
def pay(amount: int) -> str:
    """Pay an amount (a person approves each payment first)."""
    return f"paid {amount}"


# A run that waits for a person's approval of its one call, then answers with its result.
approving = Agent(ScriptedModel([call("pay", amount=3), answer]), {"pay": pay}, max_steps=4)
