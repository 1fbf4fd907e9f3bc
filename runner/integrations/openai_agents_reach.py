"""What an OpenAI Agents SDK agent reaches and what runner declares of it
(runner.integrations.openai_agents): the agents it hands off to or calls through
`agent.as_tool()`, its MCP servers (their `tool_meta_resolver` made to carry runner's
`_meta`), and each function tool's and handoff's runner declaration. Read once, when a
`RunnerAgent` is made.
"""

from __future__ import annotations

import inspect
from typing import Any

from agents import Agent as SdkAgent
from agents import FunctionTool, Handoff

from runner.core.tools import Tool
from runner.mcp.settlement import call_meta


def _reached(agent: SdkAgent[Any]) -> list[SdkAgent[Any]]:
    """The agents `agent` hands off to or calls as tools, and theirs, each once."""
    found: dict[int, SdkAgent[Any]] = {}
    todo = [agent]
    while todo:
        current = todo.pop()
        for other in [*map(_target, current.handoffs), *map(_called, current.tools)]:
            if other is not None and id(other) not in found:
                found[id(other)] = other
                todo.append(other)
    return list(found.values())


def _target(handoff: Any) -> SdkAgent[Any] | None:
    """The agent a handoff leads to (an Agent, or a `handoff(agent)` that still knows it)."""
    if isinstance(handoff, SdkAgent):
        return handoff
    ref = getattr(handoff, "_agent_ref", None)
    target = ref() if callable(ref) else None
    return target if isinstance(target, SdkAgent) else None


def _called(tool: Any) -> SdkAgent[Any] | None:
    """The agent an `agent.as_tool()` tool runs."""
    if not getattr(tool, "_is_agent_tool", False):
        return None
    agent = getattr(tool, "_agent_instance", None)
    return agent if isinstance(agent, SdkAgent) else None


def _agents(agent: SdkAgent[Any]) -> list[SdkAgent[Any]]:
    """The agent and those it hands off to, each once."""
    found: dict[int, SdkAgent[Any]] = {}
    agents = [agent]
    while agents:
        current = agents.pop()
        if id(current) in found:
            continue
        found[id(current)] = current
        agents += [target for target in map(_target, current.handoffs) if target is not None]
    return list(found.values())


def _declarations(agent: SdkAgent[Any], idempotent: set[str], has_mcp: bool) -> dict[str, Tool]:
    """Each function tool's runner declaration (of the agent and those it hands off to).
    With MCP servers, names that are no function tool's are left to check against their
    lists."""
    declared: dict[str, Tool] = {}
    for current in _agents(agent):
        for tool in current.tools:
            if isinstance(tool, FunctionTool):
                declared[tool.name] = Tool(_declared, idempotent=tool.name in idempotent)
        for handoff in current.handoffs:
            # A handoff is a call of the model's too, which the SDK answers itself: declared,
            # so `runner replay` finds the tool a recorded handoff called.
            if isinstance(handoff, Handoff):
                declared.setdefault(handoff.tool_name, Tool(_declared))
            else:
                declared.setdefault(Handoff.default_tool_name(handoff), Tool(_declared))
    unknown = sorted(idempotent - set(declared))
    if unknown and not has_mcp:
        raise ValueError(f"idempotent names no function tool of the agent: {', '.join(unknown)}")
    return declared


def _servers(agent: SdkAgent[Any]) -> list[Any]:
    """The MCP servers of the agent and those it hands off to, each once."""
    servers: dict[int, Any] = {}
    for current in _agents(agent):
        for server in current.mcp_servers:
            servers.setdefault(id(server), server)
    return list(servers.values())


_KEYED = "__runner_keyed__"


def _keyed(inner: Any) -> Any:
    """A server's `tool_meta_resolver` that adds runner's `_meta` (the call's key, run and
    attempt) to what `inner` (the server's own, if any) gives."""

    async def resolve(context: Any) -> dict[str, Any] | None:
        given = None if inner is None else inner(context)
        if inspect.isawaitable(given):
            given = await given
        return {**(given or {}), **call_meta()} or None

    setattr(resolve, _KEYED, True)
    return resolve


def _declared(**args: Any) -> Any:
    """A declaration's stand-in function: the SDK parses and calls the tool itself."""
    raise NotImplementedError("an Agents SDK tool is called through its FunctionTool")
