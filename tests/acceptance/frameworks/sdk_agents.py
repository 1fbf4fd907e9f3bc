"""OpenAI Agents SDK agents for the crash tests (tests/acceptance/test_pydantic_crash.py): the
same tools and ledgers as pydantic_agents.py (ledger_tools.py), the SDK's own Runner and its
chat-completions model talking to the server at RUNNER_TEST_OPENAI_URL."""

from __future__ import annotations

import os

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from ledger_tools import deposit_effect, notify_effect
from openai import AsyncOpenAI

from runner.integrations.openai_agents import RunnerAgent


def _model() -> OpenAIChatCompletionsModel:
    url = os.environ.get("RUNNER_TEST_OPENAI_URL", "http://127.0.0.1:9")
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="test-key-3f9c1b7d")
    return OpenAIChatCompletionsModel("gpt-4.1-mini", client)


def _agent(name: str, *, gated: bool) -> Agent[None]:
    @function_tool
    def deposit(amount: int) -> str:
        """Deposit an amount; applied once per idempotency key."""
        return deposit_effect(amount)

    @function_tool(needs_approval=gated)
    def notify(text: str) -> str:
        """Tell the owner."""
        return notify_effect(text)

    return Agent(name=name, instructions="Deposit, then notify.", tools=[deposit, notify],
                 model=_model())  # fmt: skip


ledgered = RunnerAgent(_agent("ledgered", gated=False), idempotent={"deposit"}, max_steps=6)
gated = RunnerAgent(_agent("gated", gated=True), idempotent={"deposit"}, max_steps=6)


# A tree (tests/acceptance/test_sdk_tree_crash.py): `bank` asks its sub-agent `teller`, a
# child run, through the SDK's `as_tool()`; teller deposits (idempotent), then answers.
@function_tool
def deposit(amount: int) -> str:
    """Deposit an amount; applied once per idempotency key."""
    return deposit_effect(amount)


teller_agent = Agent(name="teller", instructions="Teller: deposit.", tools=[deposit],
                     model=_model())  # fmt: skip
bank_agent = Agent(
    name="bank",
    instructions="Bank: ask the teller.",
    tools=[teller_agent.as_tool("teller", "Ask the teller to do something.")],
    model=_model(),
)
teller = RunnerAgent(teller_agent, idempotent={"deposit"}, max_steps=4)
bank = RunnerAgent(bank_agent, sub_agents=[teller], max_steps=4, max_tokens=5_000)
