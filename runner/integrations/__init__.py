"""Agents written with other frameworks, made durable on runner's journal.

`runner.integrations.pydantic_ai.RunnerAgent` wraps a Pydantic AI `Agent` (`pydantic_ai`),
`runner.integrations.openai_agents.RunnerAgent` an OpenAI Agents SDK `Agent`
(`openai_agents`, over what the agent reaches and declares, `openai_agents_reach`, its
journaled copies, tools and sub-agents, `openai_agents_journaled`, and its journaled model,
`openai_agents_model`); and Pydantic AI's evaluators score runs as scorers (`pydantic_evals`).
The framework keeps its own loop; each model request and tool call it makes goes through the
run's journal (runner.core.foreign), the calls its own MCP client makes settled as
`runner.mcp` settles an MCP tool's. Each framework is an optional extra, imported only when
its module is.

It may import: `runner.core`, `runner.mcp` (an MCP tool's settlement and `_meta`) and the
shared leaves.
"""
