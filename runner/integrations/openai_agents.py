"""An OpenAI Agents SDK agent, durable on runner's journal: `RunnerAgent(agent)`.

    from agents import Agent, function_tool
    from runner.integrations.openai_agents import RunnerAgent

    support = Agent(name="support", instructions="...", tools=[lookup_order, refund])
    agent = RunnerAgent(support, idempotent={"lookup_order"}, max_steps=12)

`agent` is a runner agent, accepted wherever one is. The SDK's `Runner` runs its own loop; each
model request (every agent of the run: handoffs included) and each function tool call goes
through the run's journal (runner.core.foreign), as for `runner.integrations.pydantic_ai`:
a response or a tool result the journal holds is never asked for or run again, a call a crash
left in flight is settled by its declaration (`idempotent={...}`: run again with the same key,
`runner.current_call().idempotency_key`; else the model is told `OutcomeUnknown`), the agent's
code is replayed from the start on resume and a divergence stops the run with `diverged`.
The agent's MCP servers (the SDK's own `MCPServerStdio`, `MCPServerStreamableHttp`, ...) are
connected for each run unless connected already, and their tools are settled as
`runner.mcp`'s are, by the server's annotations: read-only or idempotent ones run again with
the same key after a crash, any other gives `OutcomeUnknown`; `idempotent={"name": False}`
overrides that per tool. Each call carries its key in the request's `_meta`
(`runner.mcp.KEY_META`, added through each server's `tool_meta_resolver`, after yours), and
the tools listed before the first model request are journaled: a resume that finds them
changed stops with `tools_changed`.
A tool with `needs_approval` makes the run wait, holding no worker, for `runner approve` or
`runner deny`; a denial's reason is what the model is shown. A message sent to the run
(`runner send`) enters the SDK's input as a user turn before its next model request, journaled
there. `run_config` is the SDK's `RunConfig` (its `model_provider` names the models); tracing
to OpenAI is off unless it says.

`stream=True` runs the agent as `Runner.run_streamed` does, through each model's
`stream_response`: the text and each call's arguments reach `runner tail`, the SSE stream and
the page as they come, and the journal records the whole response once. Output items a reply
does not say (reasoning, the provider's item ids) are journaled with it and handed back as
they were on resume.

Sub-agents as child runs, when named: `RunnerAgent(triage, sub_agents=[billing, researcher])`,
each a module-level `RunnerAgent` of an agent that `triage` hands off to or calls through
`agent.as_tool()`. In a durable run such a call starts a child run (its id derived from the
call's key) under the tree's budget and parks the parent until it ends, as Pydantic AI's
`delegate()` does: an `as_tool()` child's task is the call's `input`, its answer the call's
result; a handoff child's task is the conversation so far (the SDK's nested handoff history),
its answer the parent's. Sub-agents not named run inside the parent's run.

The glue is split by idea: what an agent reaches and declares (its handoffs, `as_tool()`
agents, MCP servers, function tools: runner.integrations.openai_agents_reach), the copies of
the agents whose model requests, tool calls, MCP listings and handoffs go through the
journal, sub-agents as child runs included (runner.integrations.openai_agents_journaled), and
the SDK's responses turned into `Reply` and back (runner.integrations.openai_agents_responses).
This module holds `RunnerAgent`, which drives the SDK's `Runner` over them, and `wrap`.

The SDK (`pip install "runner[openai-agents]"`) is imported when this module is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pydantic_core
from agents import Agent as SdkAgent
from agents import RunConfig
from agents import Runner as SdkRunner
from agents.exceptions import AgentsException, MaxTurnsExceeded
from agents.models.multi_provider import MultiProvider

from runner.core.agent import Agent
from runner.core.budgets import Budgets
from runner.core.foreign import (
    ForeignRun,
    Stopped,
    drive_foreign,
    idempotent_said,
)
from runner.core.journal import Journal
from runner.core.result import AgentResult
from runner.core.stop_reasons import StopReason
from runner.core.tools import Tool
from runner.errors import ModelFatal, RunnerError
from runner.integrations.openai_agents_journaled import _Journaled
from runner.integrations.openai_agents_reach import (
    _KEYED,
    _declarations,
    _keyed,
    _reached,
    _servers,
)

__all__ = ["RunnerAgent", "wrap"]


class RunnerAgent(Agent):
    """An Agents SDK `Agent` run durably by runner: accepted wherever a runner agent is.

    `idempotent` names the function tools whose interrupted call may run again with the same
    key; `sub_agents` are the RunnerAgents (module attributes, with their own budgets) of
    the agents it hands off to or calls with `as_tool()` that run as child runs; `stream=True`
    streams each model request, its pieces to the run's followers; `budgets` are runner's
    (`max_steps`, `max_tokens`, `max_cost`, `max_seconds`, ...).
    """

    def __init__(
        self,
        agent: SdkAgent[Any],
        *,
        name: str | None = None,
        release: str | None = None,
        ref: str | None = None,
        idempotent: Iterable[str] | Mapping[str, bool] = (),
        run_config: RunConfig | None = None,
        context: Any = None,
        limit: str | None = None,
        sub_agents: Iterable[RunnerAgent] = (),
        stream: bool = False,
        **budgets: Any,
    ) -> None:
        if not isinstance(agent, SdkAgent):
            raise ValueError(f"RunnerAgent wraps an agents.Agent, not {type(agent).__name__}")
        self.agent = agent
        self.stream = stream
        self.sub_agents = _sub_agents(agent, sub_agents)
        self.run_config = run_config or RunConfig(tracing_disabled=True)
        self.sdk_context = context
        said = idempotent_said(idempotent)
        self.servers = _servers(agent)
        for server in self.servers:
            if not getattr(server.tool_meta_resolver, _KEYED, False):
                server.tool_meta_resolver = _keyed(server.tool_meta_resolver)
        declared = _declarations(agent, {n for n, yes in said.items() if yes}, bool(self.servers))
        # What the user says of MCP tools, checked against what their servers list.
        self.mcp_idempotent = {name: yes for name, yes in said.items() if name not in declared}
        super().__init__(
            _FrameworkModel(agent),
            declared,
            name=name or agent.name,
            release=release,
            ref=ref,
            limit=limit,
            loop=self._drive,
            **budgets,
        )
        # Where the RunnerAgent was made, not this module: `reference()` looks there.
        self._module = sys._getframe(1).f_globals.get("__name__")

    def _drive(
        self,
        model: Any,
        tools: Mapping[str, Tool],
        task: str,
        budgets: Budgets,
        journal: Journal,
        **options: Any,
    ) -> AgentResult:
        """runner.core.loop.drive's part for an Agents SDK agent: its own loop, journaled."""
        return drive_foreign(
            tools, task, budgets, journal, options, self._run, _stop_for, self.stream
        )

    async def _run(self, run: ForeignRun, task: str) -> Any:
        async with AsyncExitStack() as stack:
            for server in self.servers:
                if getattr(server, "session", None) is None:  # not connected by its owner
                    await stack.enter_async_context(server)
            return await self._run_connected(run, task)

    async def _run_connected(self, run: ForeignRun, task: str) -> Any:
        provider = self.run_config.model_provider or MultiProvider()
        journaled = _Journaled(run, provider, self.sub_agents, self.mcp_idempotent, self.stream)
        agent = journaled.agent(self.agent)
        config = dataclasses.replace(self.run_config, model=None)
        # runner's max_steps is the cap; the SDK's own turn limit must not come first (nor
        # stop the turn that relays a handoff's child run).
        turns = run.rules.budgets.max_steps + 2
        try:
            result = await self._turns(agent, task, config, turns)
        except AgentsException as exc:
            raise _ours(exc) from None
        while result.interruptions:
            ids = [_call_id(item) for item in result.interruptions]
            answers = await asyncio.to_thread(run.approvals, ids)
            state = result.to_state()
            for item, call_id in zip(result.interruptions, ids, strict=True):
                denial = answers[call_id]
                if denial is None:
                    state.approve(item)
                else:
                    state.reject(item, rejection_message=denial)
            try:
                result = await self._turns(agent, state, config, turns)
            except AgentsException as exc:
                raise _ours(exc) from None
        return pydantic_core.to_jsonable_python(result.final_output)

    async def _turns(self, agent: SdkAgent[Any], given: Any, config: RunConfig, turns: int) -> Any:
        """The SDK's run from `given` (the task, or a run state after approvals) to its end
        or its next interruption: streamed (`Runner.run_streamed`) if asked."""
        if not self.stream:
            return await SdkRunner.run(
                agent, given, context=self.sdk_context, run_config=config, max_turns=turns
            )
        streamed = SdkRunner.run_streamed(
            agent, given, context=self.sdk_context, run_config=config, max_turns=turns
        )
        async for _event in streamed.stream_events():
            pass  # the pieces went to the run's followers as the model's stream gave them
        return streamed


def _ours(exc: AgentsException) -> Exception:
    """What the SDK raised, or runner's own exception inside it: the SDK wraps what a tool
    raises (a run parking for its child, a stop, a lost lease) in its UserError."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, RunnerError | Stopped):
            return cause
        cause = cause.__cause__
    return exc


def _sub_agents(agent: SdkAgent[Any], given: Iterable[RunnerAgent]) -> dict[int, RunnerAgent]:
    """The sub-agents that run as child runs, by the id of the SDK agent each wraps: each a
    RunnerAgent of an agent that `agent` (or an agent it reaches) hands off to or calls as a
    tool (`agent.as_tool()`)."""
    children = {}
    for child in given:
        if not isinstance(child, RunnerAgent):
            raise ValueError(
                f"sub_agents are RunnerAgents (their budgets, a worker finds them by "
                f"reference), not {type(child).__name__}"
            )
        children[id(child.agent)] = child
    reached = {id(found) for found in _reached(agent)}
    strangers = [child.agent.name for key, child in children.items() if key not in reached]
    if strangers:
        raise ValueError(
            f"sub_agents names agents that {agent.name} never hands off to nor calls as a "
            f"tool: {', '.join(strangers)}"
        )
    return children


def wrap(agent: SdkAgent[Any]) -> RunnerAgent:
    """An Agents SDK agent under runner's defaults (`runner run file.py:agent` given the
    SDK's `Agent` itself)."""
    return RunnerAgent(agent)


@dataclass
class _FrameworkModel:
    """The RunnerAgent's `model`: never called (the SDK asks its own), named for traces."""

    agent: SdkAgent[Any]

    @property
    def model(self) -> str | None:
        model = self.agent.model
        return model if isinstance(model, str) or model is None else type(model).__name__

    def __call__(self, transcript: list[dict[str, Any]]) -> Any:
        raise ModelFatal("an Agents SDK agent's model is asked through its own loop")


def _stop_for(run: ForeignRun, exc: Exception) -> StopReason | None:
    if isinstance(exc, MaxTurnsExceeded):
        return StopReason.MAX_STEPS
    if isinstance(exc, AgentsException):
        # Raised on a replayed response (a tool it calls is gone, say): the code changed.
        return StopReason.DIVERGED if run.replaying else StopReason.MODEL_ERROR
    return None


def _call_id(item: Any) -> str:
    raw = item.raw_item
    found = raw.get("call_id") if isinstance(raw, Mapping) else getattr(raw, "call_id", None)
    return str(found)
