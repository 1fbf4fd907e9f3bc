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

The SDK (`pip install "runner[openai-agents]"`) is imported when this module is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pydantic_core
from agents import Agent as SdkAgent
from agents import FunctionTool, Handoff, RunConfig, Usage
from agents import Runner as SdkRunner
from agents import handoff as sdk_handoff
from agents.exceptions import AgentsException, MaxTurnsExceeded
from agents.handoffs.history import default_handoff_history_mapper
from agents.items import ModelResponse
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.models.interface import Model, ModelProvider
from agents.models.multi_provider import MultiProvider
from openai import APIStatusError
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputItemAddedEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)
from pydantic import TypeAdapter

from runner.core.actions import Call
from runner.core.agent import Agent, SubAgent
from runner.core.budgets import Budgets
from runner.core.foreign import (
    ForeignRun,
    Outcome,
    Pieces,
    Reply,
    Stopped,
    drive_foreign,
    idempotent_said,
)
from runner.core.journal import Journal
from runner.core.result import AgentResult
from runner.core.stop_reasons import StopReason
from runner.core.tools import Tool
from runner.errors import ModelFatal, RunnerError, RunWaiting
from runner.mcp.settlement import call_meta, settlement_of

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


class _Journaled:
    """Copies of an agent and the agents it hands off to, their models and function tools
    going through the run's journal."""

    def __init__(
        self,
        run: ForeignRun,
        provider: ModelProvider,
        children: Mapping[int, RunnerAgent],
        mcp_idempotent: Mapping[str, bool],
        stream: bool = False,
    ) -> None:
        self.run = run
        self.provider = provider
        self.stream = stream
        self.made: dict[int, SdkAgent[Any]] = {}
        # The sub-agents that run as child runs: in a durable run only (in memory, where
        # nothing parks, they run inside the run as any other).
        self.children = children if getattr(run.journal, "parks_children", False) else {}
        # The conversation of the last request and its response, and the call ids it asked
        # for by tool name: a handoff learns from them which call it is and what it hands on.
        self.conversation: list[Any] = []
        self.call_ids: dict[str, str] = {}
        # The child runs' calls in flight (the SDK runs a step's calls at once).
        self.parking: set[asyncio.Future[Outcome]] = set()
        # The messages sent to the run (`runner send`), each with where it entered the
        # conversation: after that many items of the SDK's input for the request it came
        # before. The SDK rebuilds its input at every request from the run's items, so
        # each request gets them again, in place.
        self.said: list[tuple[int, list[Any]]] = []
        self.mcp_idempotent = mcp_idempotent
        # What the servers listed for the MCP tools last offered to the model, by name.
        self.listings: dict[str, Any] = {}

    def shown(self, given: Any) -> Any:
        """The SDK's input for this step's request, with the messages sent to the run in
        their places: those heard at earlier steps, then those this step hears (journaled,
        or past the record delivered now: runner.core.foreign.ForeignRun.heard)."""
        items = _items_of(given)
        heard = self.run.heard()
        if heard:
            self.said.append((len(items), [{"role": "user", "content": _said(m)} for m in heard]))
        if not self.said:
            return given
        shown = list(items)
        for place, turns in reversed(self.said):
            at = min(place, len(shown))
            shown[at:at] = turns
        return shown

    def agent(self, agent: SdkAgent[Any]) -> SdkAgent[Any]:
        made = self.made.get(id(agent))
        if made is not None:
            return made
        model = agent.model
        inner = model if isinstance(model, Model) else self.provider.get_model(model)
        copy = agent.clone(model=_JournaledModel(inner, self))
        self.made[id(agent)] = copy  # before the handoffs: they may lead back here
        copy.tools = [self.tool(tool) for tool in agent.tools]
        if agent.mcp_servers:
            # The SDK lists an agent's MCP tools at each turn (get_all_tools): journaled too.
            setattr(copy, "get_mcp_tools", self.mcp_tools(copy))  # noqa: B010
        copy.handoffs = [self.handoff(handoff) for handoff in agent.handoffs]
        return copy

    def handoff(self, handoff: Any) -> Any:
        target = _target(handoff)
        child = None if target is None else self.children.get(id(target))
        if child is not None:
            return self.child_handoff(handoff, child)
        return self.agent(handoff) if isinstance(handoff, SdkAgent) else handoff

    def child_handoff(self, handoff: Any, child: RunnerAgent) -> Handoff[Any, Any]:
        """A handoff to a sub-agent as a child run: the child takes the conversation so far
        (as the SDK's nested handoff history summarises it) as its task; once it ends, its
        answer is this run's (relayed by an agent that asks no model)."""
        made = handoff if isinstance(handoff, Handoff) else sdk_handoff(handoff)
        run, sub = self.run, SubAgent(child, child.budgets)

        async def on_invoke_handoff(ctx: Any, arguments: str) -> SdkAgent[Any]:
            call_id = self.call_ids.get(made.tool_name, "")
            task = str(default_handoff_history_mapper(self.conversation)[0].get("content"))
            declared = Tool(_declared, sub_agent=sub)
            outcome = await asyncio.to_thread(run.call, call_id, _declared, declared, task)
            return _relay(child.agent, outcome.content)

        return dataclasses.replace(made, on_invoke_handoff=on_invoke_handoff)

    def mcp_tools(self, agent: SdkAgent[Any]) -> Any:
        """The agent's `get_mcp_tools`, its tools journaled and declared as their servers'
        annotations say."""

        async def get_mcp_tools(run_context: Any) -> list[Any]:
            try:
                tools = await SdkAgent.get_mcp_tools(agent, run_context)
            except Exception:
                # A server that died (or dropped the connection) since the last turn: the
                # SDK's session does not come back by itself. Connect again, once.
                servers: list[Any] = list(agent.mcp_servers)  # the SDK's are untyped
                for server in servers:
                    with contextlib.suppress(Exception):
                        await server.cleanup()
                    await server.connect()
                tools = await SdkAgent.get_mcp_tools(agent, run_context)
            listed: dict[str, Any] = {}
            for server in agent.mcp_servers:
                for mcp_tool in await server.list_tools(run_context, agent):
                    listed[mcp_tool.name] = mcp_tool.model_dump(
                        mode="json", by_alias=True, exclude_none=True
                    )
            made = []
            for tool in tools:
                definition = listed.get(tool.name)  # None: renamed (server-prefixed names)
                annotations = None if definition is None else definition.get("annotations")
                self.listings[tool.name] = {
                    "name": tool.name,
                    "description": None if definition is None else definition.get("description"),
                    "inputSchema": None if definition is None else definition.get("inputSchema"),
                    "annotations": annotations,
                }
                settled = settlement_of(annotations, self.mcp_idempotent.get(tool.name))
                made.append(self.tool(tool, Tool(_declared, idempotent=settled.idempotent)))
            return made

        return get_mcp_tools

    def tool(self, tool: Any, declared: Tool | None = None) -> Any:
        if not isinstance(tool, FunctionTool):
            return tool
        called = _called(tool)
        child = None if called is None else self.children.get(id(called))
        if child is not None:
            return self.child_tool(tool, child)
        run = self.run
        # The call itself, without the SDK's failure handling (`failure_error_function`),
        # which would hand an exception back as an ordinary result: runner records it as a
        # failed call (the error streak, `tool_errors`) and shows the model its error, as
        # its own loop does.
        inner = getattr(tool.on_invoke_tool, "_invoke_tool_impl", tool.on_invoke_tool)

        async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
            recorded = run.recorded_outcome(ctx.tool_call_id)  # in memory: on the loop
            if recorded is not None:
                return recorded.content
            loop = asyncio.get_running_loop()
            returned: list[Any] = []

            def execute(**_args: Any) -> str:  # the SDK parses the arguments itself
                async def call() -> Any:
                    return await inner(ctx, arguments)

                value = asyncio.run_coroutine_threadsafe(call(), loop).result()
                returned.append(value)
                return _text_of(value)

            outcome = await asyncio.to_thread(run.call, ctx.tool_call_id, execute, declared)
            if returned and not outcome.is_error:
                return returned[0]
            return outcome.content

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    def child_tool(self, tool: FunctionTool, child: RunnerAgent) -> FunctionTool:
        """An `agent.as_tool()` tool whose call starts a child run of the sub-agent on the
        call's `input`; the child's answer (or why it stopped) is the call's result."""
        run, sub = self.run, SubAgent(child, child.budgets)

        async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
            declared = Tool(_declared, sub_agent=sub)
            task = _input_of(arguments)
            call = asyncio.ensure_future(
                asyncio.to_thread(run.call, ctx.tool_call_id, _declared, declared, task)
            )
            self.parking.add(call)
            try:
                outcome = await asyncio.shield(call)
            except RunWaiting:
                # The run parks: not before the step's other child calls have started
                # their child runs too (the SDK would cancel them, and a child whose wait
                # came after the park could be left for no one to run).
                others = [other for other in self.parking if other is not call]
                await asyncio.gather(*others, return_exceptions=True)
                raise
            finally:
                self.parking.discard(call)
            return outcome.content

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


class _JournaledModel(Model):
    """A model whose every response goes through the run's journal."""

    def __init__(self, inner: Model, journaled: _Journaled) -> None:
        self.inner = inner
        self.journaled = journaled
        self.run = journaled.run

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        args, kwargs, shown, recorded = await self.prepared(args, kwargs)
        if recorded is not None:
            return self.noted(shown, recorded, _response_of(recorded))
        response, _events = await self.ask(args, kwargs, shown, self.journaled.stream)
        return self.noted(shown, _reply_of(response), response)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The response as `Runner.run_streamed` reads it: the model's own stream events once
        the journal has the response (their pieces went to the run's followers as they
        came), or, replayed from the journal, its completed event alone."""
        args, kwargs, shown, recorded = await self.prepared(args, kwargs)
        if recorded is not None:
            yield _completed(self.noted(shown, recorded, _response_of(recorded)))
            return
        response, events = await self.ask(args, kwargs, shown, True)
        self.noted(shown, _reply_of(response), response)
        for event in events:
            yield event

    async def prepared(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any], Any, Reply | None]:
        """The request's arguments with the messages sent to the run in its input, that
        input, and the journal's reply to it (None: the model is asked)."""
        if not self.run.listings_checked:
            listings = self.journaled.listings
            unknown = sorted(set(self.journaled.mcp_idempotent) - set(listings))
            if unknown:
                raise ValueError(f"idempotent names no tool of the agent: {', '.join(unknown)}")
            await asyncio.to_thread(self.run.listed, dict(listings))
        positional = len(args) > 1  # `input` is the second parameter of both requests
        given = args[1] if positional else kwargs.get("input", [])
        # On the loop, not a thread: both read what this process holds (a write only when the
        # step before has something to settle, or messages came), and two hops to a thread
        # and back cost more than that on a busy machine (docs/performance.md).
        recorded = self.run.recorded_reply(_returned(given), None)
        shown = self.journaled.shown(given)
        if positional:
            args = (args[0], shown, *args[2:])
        else:
            kwargs["input"] = shown
        return args, kwargs, shown, recorded

    async def ask(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], shown: Any, stream: bool
    ) -> tuple[ModelResponse, list[Any]]:
        """The model asked through the run's journal (`ForeignRun.ask`): its response, and
        the events of its stream when it streamed."""
        events: list[Any] = []

        async def request(pieces: Pieces | None) -> ModelResponse:
            events.clear()  # a retry's stream starts afresh
            try:
                if stream:
                    return await _drained(
                        self.inner.stream_response(*args, **kwargs), pieces, events
                    )
                response: ModelResponse = await self.inner.get_response(*args, **kwargs)
            except APIStatusError as exc:
                # A request the provider refused (bad, unauthorised, too long) is refused
                # again: no retry. Timeouts, conflicts, rate limits and 5xx are retried.
                if 400 <= exc.status_code < 500 and exc.status_code not in (408, 409, 429):
                    raise ModelFatal(f"{type(exc).__name__}: {exc}") from None
                raise
            return response

        model = getattr(self.inner, "model", None)
        name = model if isinstance(model, str) else None
        response: ModelResponse = await asyncio.to_thread(
            self.run.ask,
            request,
            lambda r: (_reply_of(r, _cost_of(name, r.usage)), r),
            shown,
            asyncio.get_running_loop(),
        )
        return response, events

    def noted(self, shown: Any, reply: Reply, response: ModelResponse) -> ModelResponse:
        """The response, noted for a handoff that follows it."""
        self.journaled.call_ids = {call.tool: call.id or "" for call in reply.calls}
        self.journaled.conversation = [*_items_of(shown), *response.to_input_items()]
        return response


async def _drained(
    stream: AsyncIterator[Any], pieces: Pieces | None, events: list[Any]
) -> ModelResponse:
    """A model's stream read to its end, each piece handed to `pieces` as it comes: the
    response its completed event holds, as `Runner.run_streamed` makes it."""
    completed: Response | None = None
    async for event in stream:
        events.append(event)
        if isinstance(event, ResponseCompletedEvent):
            completed = event.response
        elif pieces is None:
            continue
        elif isinstance(event, ResponseTextDeltaEvent):
            pieces.text(event.delta)
        elif isinstance(event, ResponseOutputItemAddedEvent) and isinstance(
            event.item, ResponseFunctionToolCall
        ):
            pieces.arguments(event.output_index, event.item.arguments, event.item.name)
        elif isinstance(event, ResponseFunctionCallArgumentsDeltaEvent):
            pieces.arguments(event.output_index, event.delta)
    if completed is None:
        raise AgentsException("the model's stream ended with no response.completed event")
    usage = completed.usage
    return ModelResponse(
        output=completed.output,
        usage=Usage(
            requests=1,
            input_tokens=usage.input_tokens,
            input_tokens_details=usage.input_tokens_details,
            output_tokens=usage.output_tokens,
            output_tokens_details=usage.output_tokens_details,
            total_tokens=usage.total_tokens,
        )
        if usage is not None
        else Usage(requests=1),
        response_id=completed.id,
    )


def _completed(response: ModelResponse) -> ResponseCompletedEvent:
    """A journaled response as the stream event that ends a streamed one."""
    whole = Response.model_construct(
        id=response.response_id or FAKE_RESPONSES_ID,
        object="response",
        output=response.output,
        usage=None,
    )
    return ResponseCompletedEvent.model_construct(
        response=whole, sequence_number=0, type="response.completed"
    )


class _Relay(Model):
    """The model of a handoff's child run, once it ended: its answer, asked of nobody (the
    child's requests are journaled in the child)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return _response_of(Reply(text=self.answer))

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        yield _completed(_response_of(Reply(text=self.answer)))


def _relay(agent: SdkAgent[Any], answer: str) -> SdkAgent[Any]:
    """The agent a handoff to a child run hands on to: the child's agent (its name, its
    output type), answering with the child's answer and doing nothing else."""
    return agent.clone(
        model=_Relay(answer),
        tools=[],
        handoffs=[],
        mcp_servers=[],
        input_guardrails=[],
        output_guardrails=[],
        hooks=None,
    )


def _input_of(arguments: str) -> str:
    """An `agent.as_tool()` call's task: its `input` argument, else its arguments."""
    parsed = _args_of(arguments)
    given = parsed.get("input")
    return given if isinstance(given, str) else arguments


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


def _items_of(given: Any) -> list[Any]:
    """The SDK's input as a list of items (a first request's may be the bare task)."""
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def _said(message: Any) -> str:
    """A message sent to the run, as the user turn the model reads."""
    return message if isinstance(message, str) else json.dumps(message)


def _returned(given: Any) -> dict[str, Outcome]:
    """Each call's outcome as the SDK shows it to the model, by call id."""
    outcomes: dict[str, Outcome] = {}
    for item in given if isinstance(given, list) else []:
        if isinstance(item, Mapping) and item.get("type") == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            outcomes[str(item.get("call_id"))] = Outcome(text, False)
    return outcomes


def _reply_of(response: ModelResponse, cost: float = 0.0) -> Reply:
    texts, calls = [], []
    says_more = False
    for item in response.output:
        if isinstance(item, ResponseOutputMessage):
            texts += [part.text for part in item.content if isinstance(part, ResponseOutputText)]
        elif isinstance(item, ResponseFunctionToolCall):
            calls.append(Call(item.name, _args_of(item.arguments), item.call_id))
        else:
            says_more = True  # reasoning, a hosted tool's call, ...
        # The Responses API's own item ids are sent back with the history (chat completions
        # get the SDK's stand-in id).
        says_more = says_more or getattr(item, "id", None) not in (None, FAKE_RESPONSES_ID)
    return Reply(
        text="".join(texts) or None,
        calls=tuple(calls),
        tokens=response.usage.input_tokens + response.usage.output_tokens,
        cost=cost,
        raw=_whole(response) if says_more else None,
    )


_OUTPUT_ITEMS: TypeAdapter[list[ResponseOutputItem]] = TypeAdapter(list[ResponseOutputItem])


def _whole(response: ModelResponse) -> dict[str, Any]:
    """The response's output items as the SDK's own JSON, with the response's id."""
    output = _OUTPUT_ITEMS.dump_python(list(response.output), mode="json", exclude_none=True)
    return {"output": output, "response_id": response.response_id}


def _cost_of(model: str | None, usage: Usage) -> float:
    """What a response cost in USD by its model's price in genai-prices' table (the
    `prices` extra): 0 for a model it does not price, or without the table (then
    `max_cost` cannot stop the run)."""
    if model is None:
        return 0.0
    try:
        import genai_prices

        counted = genai_prices.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.input_tokens_details.cached_tokens or 0,
        )
        return float(genai_prices.calc_price(counted, model).total_price)
    except Exception:
        return 0.0


def _response_of(reply: Reply) -> ModelResponse:
    """The journal's reply as the response the SDK first got."""
    usage = Usage(requests=1, input_tokens=reply.tokens, total_tokens=reply.tokens)
    if isinstance(reply.raw, dict):  # kept whole: its reasoning and ids as they came
        items = _OUTPUT_ITEMS.validate_python(reply.raw.get("output") or [])
        return ModelResponse(output=items, usage=usage, response_id=reply.raw.get("response_id"))
    output: list[Any] = []
    if reply.text:
        text = ResponseOutputText(text=reply.text, type="output_text", annotations=[])
        output.append(
            ResponseOutputMessage(
                id="__fake_id__",
                content=[text],
                role="assistant",
                status="completed",
                type="message",
            )
        )
    for call in reply.calls:
        output.append(
            ResponseFunctionToolCall(
                arguments=json.dumps(call.args),
                call_id=call.id or "",
                name=call.tool,
                type="function_call",
                status="completed",
            )
        )
    return ModelResponse(output=output, usage=usage, response_id=None)


def _args_of(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {"_unparsed": arguments}
    return parsed if isinstance(parsed, dict) else {"_unparsed": arguments}


def _call_id(item: Any) -> str:
    raw = item.raw_item
    found = raw.get("call_id") if isinstance(raw, Mapping) else getattr(raw, "call_id", None)
    return str(found)


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    texts = _texts_of(value)
    if texts is not None:
        return "\n".join(texts)
    try:
        return pydantic_core.to_json(value).decode()
    except Exception:
        return str(value)


def _texts_of(value: Any) -> list[str] | None:
    """The texts of a tool output made of text items only (as an MCP tool's is: the SDK's
    `ToolOutputText`, or a list of them), which the journal keeps as plain text; else None."""
    items = value if isinstance(value, list) else [value]
    texts = []
    for item in items:
        found = item if isinstance(item, Mapping) else getattr(item, "__dict__", {})
        if found.get("type") != "text" or not isinstance(found.get("text"), str):
            return None
        texts.append(found["text"])
    return texts or None
