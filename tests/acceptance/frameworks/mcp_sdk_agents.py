"""An OpenAI Agents SDK agent for the framework MCP tests (tests/over_mcp/test_framework_mcp.py),
under runner's `RunnerAgent`, reaching the ledger server (tests/over_mcp/ledger_server.py)
through the SDK's own MCP clients, `MCPServerStdio` or, when `MCP_URL` is set,
`MCPServerStreamableHttp`. Its model is the SDK's chat-completions class, talking to the
server at RUNNER_TEST_OPENAI_URL. mcp_pydantic_agents.py has the same agent in Pydantic AI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from agents import Agent, OpenAIChatCompletionsModel
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from openai import AsyncOpenAI

from runner.integrations.openai_agents import RunnerAgent

SERVER = Path(__file__).parents[2] / "over_mcp" / "ledger_server.py"
URL = os.environ.get("RUNNER_TEST_OPENAI_URL", "http://127.0.0.1:9")
KEY = "test-key-3f9c1b7d"


def _server() -> MCPServerStdio | MCPServerStreamableHttp:
    url = os.environ.get("MCP_URL")
    if url:
        return MCPServerStreamableHttp(params={"url": url}, name="ledger")
    params = {"command": sys.executable, "args": [str(SERVER)], "env": dict(os.environ)}
    return MCPServerStdio(params=params, name="ledger")  # type: ignore[arg-type]


model = OpenAIChatCompletionsModel("gpt-4.1-mini", AsyncOpenAI(base_url=f"{URL}/v1", api_key=KEY))


def _agent() -> Agent[None]:
    return Agent(
        name="sdk-shop", instructions="Use the tools.", mcp_servers=[_server()], model=model
    )


agent = RunnerAgent(_agent(), max_steps=4)
# The user's word over the server's: charge (destructive) may run again, lookup may not.
trusting = RunnerAgent(_agent(), idempotent={"charge": True, "lookup": False}, max_steps=4)
