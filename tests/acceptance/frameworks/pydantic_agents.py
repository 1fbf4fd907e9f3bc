"""Pydantic AI agents for the framework crash tests (tests/acceptance/test_pydantic_crash.py),
durable under `RunnerAgent`: pydantic-ai's own OpenAI model class, talking HTTP to the
chat-completions server the test runs at RUNNER_TEST_OPENAI_URL, and two tools whose work
(ledger_tools.py) keeps ledgers outside runner's database. `gated` is `ledgered` with notify
needing a person's approval. sdk_agents.py has the same two agents written with the OpenAI
Agents SDK.
"""

from __future__ import annotations

import os

from ledger_tools import deposit_effect, notify_effect
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from runner.integrations.pydantic_ai import RunnerAgent, durable


def _model() -> OpenAIChatModel:
    url = os.environ.get("RUNNER_TEST_OPENAI_URL", "http://127.0.0.1:9")
    provider = OpenAIProvider(base_url=f"{url}/v1", api_key="test-key-3f9c1b7d")
    return OpenAIChatModel("gpt-4.1-mini", provider=provider)


def _agent(name: str, *, gated: bool) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(_model(), name=name, instructions="Deposit, then notify.")

    @agent.tool_plain
    @durable(idempotent=True)
    def deposit(amount: int) -> str:
        """Deposit an amount; applied once per idempotency key."""
        return deposit_effect(amount)

    def notify(text: str) -> str:
        """Tell the owner."""
        return notify_effect(text)

    agent.tool_plain(requires_approval=gated)(notify)
    return agent


ledgered = RunnerAgent(_agent("ledgered", gated=False), max_steps=6)
gated = RunnerAgent(_agent("gated", gated=True), max_steps=6)
