"""Copies of an OpenAI Agents SDK agent and the agents it hands off to, whose model requests,
function tool calls, MCP tool listings and handoffs go through the run's journal
(runner.integrations.openai_agents): made afresh for each run by `RunnerAgent`.

Each model request is answered from the journal or asked through it (`ForeignRun.ask`),
streamed or not, a provider's refusal (a 4xx other than 408, 409, 429) not retried; the
conversions to and from runner's `Reply` are runner.integrations.openai_agents_responses'.
A tool call is run, or settled, by runner.core.foreign's `ForeignRun.call`; an MCP tool is
declared as its server's annotations say (runner.mcp.settlement); the messages sent to the run
enter the SDK's input in their places. A sub-agent named as a child run is called through its
handoff or its `as_tool()` tool: the call starts a child run and parks the parent until it
ends, and the child's answer is relayed by an agent that asks no model.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pydantic_core
from agents import Agent as SdkAgent
from agents import FunctionTool, Handoff
from agents import handoff as sdk_handoff
from agents.handoffs.history import default_handoff_history_mapper
from agents.items import ModelResponse
from agents.models.interface import Model, ModelProvider
from openai import APIStatusError

from runner.core.agent import Agent, SubAgent
from runner.core.foreign import ForeignRun, Outcome, Pieces, Reply
from runner.core.tools import Tool
from runner.errors import ModelFatal, RunWaiting
from runner.integrations.openai_agents_reach import _called, _declared, _target
from runner.integrations.openai_agents_responses import (
    _args_of,
    _completed,
    _cost_of,
    _drained,
    _items_of,
    _reply_of,
    _response_of,
    _returned,
)
from runner.mcp.settlement import settlement_of


class _Journaled:
    """Copies of an agent and the agents it hands off to, their models and function tools
    going through the run's journal."""

    def __init__(
        self,
        run: ForeignRun,
        provider: ModelProvider,
        children: Mapping[int, Agent],
        mcp_idempotent: Mapping[str, bool],
        stream: bool = False,
    ) -> None:
        self.run = run
        self.provider = provider
        self.stream = stream
        self.made: dict[int, SdkAgent[Any]] = {}
        # The sub-agents that run as child runs: in a durable run only (in memory, where
        # nothing parks, they run inside the run as any other).
        # Each a RunnerAgent, by the id of the SDK agent it wraps (typed as runner's Agent:
        # runner.integrations.openai_agents imports this module, not the other way round).
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
        if target is not None and child is not None:  # the child wraps `target`
            return self.child_handoff(handoff, target, child)
        return self.agent(handoff) if isinstance(handoff, SdkAgent) else handoff

    def child_handoff(self, handoff: Any, target: SdkAgent[Any], child: Agent) -> Handoff[Any, Any]:
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
            return _relay(target, outcome.content)

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

    def child_tool(self, tool: FunctionTool, child: Agent) -> FunctionTool:
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
        # and back cost more than that on a busy machine (docs/performance/pydantic-ai.md).
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


def _said(message: Any) -> str:
    """A message sent to the run, as the user turn the model reads."""
    return message if isinstance(message, str) else json.dumps(message)


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
