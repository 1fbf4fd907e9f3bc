"""A Pydantic AI agent on pydantic-ai's Anthropic model class (the official `anthropic` SDK),
thinking enabled, durable under `RunnerAgent`: it talks HTTP to the Messages server the test
runs at RUNNER_TEST_ANTHROPIC_URL, with pydantic_agents.py's two tools (ledger_tools.py).
Each response's signed thinking block must go back to the provider with the history, after a
crash as before it (tests/acceptance/test_pydantic_anthropic.py).
"""

from __future__ import annotations

import os

from anthropic import AsyncAnthropic
from ledger_tools import deposit_effect, notify_effect
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider

from runner.integrations.pydantic_ai import RunnerAgent, durable


def _model() -> AnthropicModel:
    url = os.environ.get("RUNNER_TEST_ANTHROPIC_URL", "http://127.0.0.1:9")
    # The SDK's own client: pydantic-ai's default hands it an httpx client it no longer takes.
    client = AsyncAnthropic(base_url=url, api_key="test-key-3f9c1b7d")
    provider = AnthropicProvider(anthropic_client=client)
    return AnthropicModel("claude-sonnet-4-5", provider=provider)


thinking = AnthropicModelSettings(
    anthropic_thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=2048
)
agent: Agent[None, str] = Agent(
    _model(), name="thinker", instructions="Deposit, then notify.", model_settings=thinking
)


@agent.tool_plain
@durable(idempotent=True)
def deposit(amount: int) -> str:
    """Deposit an amount; applied once per idempotency key."""
    return deposit_effect(amount)


@agent.tool_plain
def notify(text: str) -> str:
    """Tell the owner."""
    return notify_effect(text)


thinker = RunnerAgent(agent, max_steps=6)
