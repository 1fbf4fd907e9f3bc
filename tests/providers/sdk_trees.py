"""Agents SDK agents with sub-agents as child runs (tests/providers/test_openai_agents.py):
`lead` calls `researcher` through the SDK's `as_tool()`, `triage` hands off to `billing`;
each sub-agent's `RunnerAgent` is named in its parent's `sub_agents`. Module attributes, so a
resume finds the child agents by reference. The tests point their models at a local server
(`serve`)."""

from __future__ import annotations

from agents import Agent, Model, function_tool

from runner.integrations.openai_agents import RunnerAgent

LOOKED_UP: list[str] = []  # the orders billing's tool looked up, in order


@function_tool
def look_up(order: str) -> str:
    """Look an order up."""
    LOOKED_UP.append(order)
    return f"order {order}: paid"


research_agent = Agent(name="researcher", instructions="Research.")
lead_agent = Agent(
    name="lead",
    instructions="Ask the researcher.",
    tools=[research_agent.as_tool("research", "Ask the researcher a question.")],
)
billing_agent = Agent(name="billing", instructions="Handle billing.", tools=[look_up])
triage_agent = Agent(name="triage", instructions="Route the request.", handoffs=[billing_agent])


# `frugal` and its sub-agent `ponderer` share 300 tokens (each response of the test's server
# is 120): ponderer's second response goes over what frugal had left.
@function_tool
def ponder(topic: str) -> str:
    """Ponder a topic."""
    return f"pondered {topic}"


ponder_agent = Agent(name="ponderer", instructions="Ponder.", tools=[ponder])
frugal_agent = Agent(
    name="frugal", tools=[ponder_agent.as_tool("ponder_it", "Have the ponderer ponder.")]
)

researcher = RunnerAgent(research_agent, max_steps=3)
lead = RunnerAgent(lead_agent, sub_agents=[researcher], max_steps=4, max_tokens=10_000)
billing = RunnerAgent(billing_agent, max_steps=3)
triage = RunnerAgent(triage_agent, sub_agents=[billing], max_steps=4)
ponderer = RunnerAgent(ponder_agent, max_steps=5)
frugal = RunnerAgent(frugal_agent, sub_agents=[ponderer], max_steps=5, max_tokens=300)


def serve(model: Model) -> None:
    """Every agent here asks `model`."""
    for agent in (
        research_agent, lead_agent, billing_agent, triage_agent, ponder_agent, frugal_agent
    ):  # fmt: skip
        agent.model = model
