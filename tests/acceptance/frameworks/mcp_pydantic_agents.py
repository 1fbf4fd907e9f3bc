"""A Pydantic AI agent for the framework MCP tests (tests/over_mcp/test_framework_mcp.py),
under runner's `RunnerAgent`, reaching the ledger server (tests/over_mcp/ledger_server.py)
through Pydantic AI's own MCP client, `MCPToolset`: the stdio command, or `MCP_URL` when set
(streamable HTTP). Its model is Pydantic AI's OpenAI class, talking to the chat-completions
server at RUNNER_TEST_OPENAI_URL. mcp_sdk_agents.py has the same agent written with the
OpenAI Agents SDK (a file each: a process imports one framework).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from runner.integrations.pydantic_ai import RunnerAgent

SERVER = Path(__file__).parents[2] / "over_mcp" / "ledger_server.py"
URL = os.environ.get("RUNNER_TEST_OPENAI_URL", "http://127.0.0.1:9")
KEY = "test-key-3f9c1b7d"


def _toolset() -> MCPToolset[None]:
    url = os.environ.get("MCP_URL")
    if url:
        return MCPToolset(url)
    return MCPToolset(StdioTransport(sys.executable, [str(SERVER)], env=dict(os.environ)))


model = OpenAIChatModel("gpt-4.1-mini", provider=OpenAIProvider(base_url=f"{URL}/v1", api_key=KEY))


def _agent() -> Agent[None, str]:
    return Agent(model, name="pydantic-shop", instructions="Use the tools.", toolsets=[_toolset()])


agent = RunnerAgent(_agent(), max_steps=4)
# The user's word over the server's: charge (destructive) may run again, lookup may not.
trusting = RunnerAgent(_agent(), idempotent={"charge": True, "lookup": False}, max_steps=4)
