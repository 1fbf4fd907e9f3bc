"""Agents written with other frameworks, made durable on runner's journal.

`runner.integrations.pydantic_ai.RunnerAgent` wraps a Pydantic AI `Agent` (`pydantic_ai`),
`runner.integrations.openai_agents.RunnerAgent` an OpenAI Agents SDK `Agent`
(`openai_agents`, over what the agent reaches and declares, `openai_agents_reach`, its
copies whose models, tools and sub-agents go through the journal, `openai_agents_journaled`,
and the SDK's responses as runner's replies, `openai_agents_responses`); and Pydantic AI's
evaluators score runs as scorers (`pydantic_evals`). The framework keeps its own loop; each
model request and tool call it makes goes through the run's journal (runner.core.foreign), the
calls its own MCP client makes settled as `runner.mcp` settles an MCP tool's. Each framework
is an optional extra, imported only when its module is.

It may import: `runner.core`, `runner.mcp` (an MCP tool's settlement and `_meta`) and the
shared leaves.
"""
