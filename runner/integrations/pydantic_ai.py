"""A Pydantic AI agent, durable on runner's journal: `RunnerAgent(agent)`.

    from pydantic_ai import Agent
    from runner.integrations.pydantic_ai import RunnerAgent

    shop = Agent("openai:gpt-4.1-mini", name="shop")
    agent = RunnerAgent(shop, idempotent={"lookup_order"}, max_steps=12)

`agent` is a runner agent: `runner run file.py:agent "..."`, `Runner.run/submit`, workers,
schedules and the HTTP API take it. Pydantic AI runs its own loop; a capability added to each
run sends every model request and tool call through the run's journal (runner.core.foreign):

- a model response the journal holds is never requested again; a tool call whose outcome it
  holds is never run again; a call a crash left in flight is settled by its declaration:
  run again with the same key if idempotent (`idempotent={...}` names, or `@durable(...)` on
  the function), else the model is told `OutcomeUnknown`. Inside a tool,
  `runner.current_call().idempotency_key` is the call's key.
- on resume the agent's code runs again from the start and is fed the journal's responses and
  outcomes in order. What the agent does between them must be deterministic (the same
  instructions, tools, output type and history for the same task); an agent that asks for
  what the journal does not hold there stops with `diverged`.
- the tools of an MCP server the agent reaches through Pydantic AI's own `MCPToolset` (a
  stdio command or a streamable HTTP URL) are settled as `runner.mcp`'s are, by what the
  server's annotations say: read-only or idempotent ones run again with the same key, any
  other gives `OutcomeUnknown`; `idempotent={"name": False}` overrides that per tool. Each
  call carries its key in the request's `_meta` (`runner.mcp.KEY_META`), and the tools the
  servers list before the first model request are journaled: a resume that finds them
  changed stops with `tools_changed`.
- a tool declared `requires_approval=True` makes the run wait (holding no worker) for
  `runner approve` / `runner deny`; a denial is what the model is shown.
- `stream=True` asks the model through Pydantic AI's streaming request path: its text and
  each call's arguments reach `runner tail`, the SSE stream and the page as they come (the
  journal still records the whole response once). A response's thinking parts (Anthropic's
  signed thinking blocks, OpenAI's reasoning) are journaled with it and handed back on
  resume, so the history the provider is sent next is an uninterrupted run's.
- a tool's exception is shown to the model (as `ModelRetry`), and Pydantic AI's own limits
  stop the run with the nearest runner reason: its tool and output retries running out with
  `tool_errors`, its usage limits with `max_steps` (requests, tool calls) or `token_budget`.

Pydantic AI (`pip install "runner[pydantic-ai]"`) is imported when this module is.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import pydantic_core
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ModelHTTPError,
    ModelRetry,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.tools import Tool as PydanticTool
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RequestUsage

from runner.core.actions import Call
from runner.core.agent import Agent, SubAgent, with_budgets
from runner.core.budgets import Budgets
from runner.core.foreign import (
    ForeignRun,
    Outcome,
    Pieces,
    Reply,
    drive_foreign,
    idempotent_said,
)
from runner.core.journal import Journal
from runner.core.kept_threads import KeptThreads, runs_in_context
from runner.core.result import AgentResult
from runner.core.stop_reasons import StopReason
from runner.core.tools import Reconcile, Tool
from runner.errors import ModelFatal
from runner.mcp.settlement import call_meta, settlement_of

__all__ = ["RunnerAgent", "durable", "wrap"]

# The attribute `durable` sets on a tool function: its runner declaration.
_DECLARED = "__runner_tool__"


def durable(
    *,
    idempotent: bool = False,
    reconcile: Reconcile | None = None,
    mark_start: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare how a Pydantic AI tool's call is settled after a crash, under `@agent.tool`:

        @agent.tool_plain
        @durable(idempotent=True)
        def lookup_order(order_id: str) -> str: ...

    The function is returned unchanged (Pydantic AI reads its signature as before)."""

    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        declared = Tool(
            fn, idempotent=idempotent, reconcile=reconcile, mark_start=mark_start, timeout=timeout
        )
        setattr(fn, _DECLARED, declared)
        return fn

    return declare


class RunnerAgent(Agent):
    """A Pydantic AI `Agent` run durably by runner: accepted wherever a runner agent is.

    `idempotent` names the tools whose interrupted call may run again with the same key (as
    `@durable(idempotent=True)` does); a mapping of names to True or False also overrides
    what an MCP server's annotations say of its tools (by the name the model calls them);
    `deps` is handed to every run (Pydantic AI's `deps=`); `stream=True` streams each model
    request, its pieces to the run's followers; `budgets` are runner's (`max_steps`,
    `max_tokens`, `max_cost`, `max_seconds`, ...).
    """

    def __init__(
        self,
        agent: PydanticAgent[Any, Any],
        *,
        name: str | None = None,
        release: str | None = None,
        ref: str | None = None,
        idempotent: Iterable[str] | Mapping[str, bool] = (),
        deps: Any = None,
        limit: str | None = None,
        stream: bool = False,
        **budgets: Any,
    ) -> None:
        if not isinstance(agent, PydanticAgent):
            raise ValueError(f"RunnerAgent wraps a pydantic_ai.Agent, not {type(agent).__name__}")
        self.agent = agent
        self.deps = deps
        said = idempotent_said(idempotent)
        has_mcp = _key_mcp_calls(agent)
        declared = _declarations(agent, {name for name, yes in said.items() if yes}, has_mcp)
        self.sync_functions = _sync_functions(agent)
        # What the user says of MCP tools, checked against what their servers list.
        self.mcp_idempotent = {name: yes for name, yes in said.items() if name not in declared}
        self.stream = stream
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

    def delegate(
        self, name: str | None = None, description: str | None = None, **budgets: Any
    ) -> PydanticTool[Any]:
        """This agent as a tool of another Pydantic AI agent (agent delegation), one text
        argument, `task`: `Agent(..., tools=[researcher.delegate("research")])`.

        In a durable run of a RunnerAgent the call starts a child run of this agent (its
        own journal, lease and stop reason; its id derived from the call's key), inside the
        tree's budget: `budgets` cap the child's own, and neither can exceed what its parent
        has left. The parent parks, holding no worker, until the child ends; the child's
        answer (or why it stopped) is the call's result. Outside runner the child runs inline.
        """
        label = name or self.name or "sub_agent"
        if not label.isidentifier():
            raise ValueError(f"a sub-agent tool's name must be an identifier, not {label!r}")
        sub = SubAgent(self, with_budgets(budgets, self.budgets))

        async def run_sub_agent(task: str) -> str:
            result = await self.agent.run(task, deps=self.deps)
            return _text_of(pydantic_core.to_jsonable_python(result.output))

        run_sub_agent.__name__ = run_sub_agent.__qualname__ = label
        setattr(run_sub_agent, _DECLARED, Tool(run_sub_agent, sub_agent=sub))
        told = description or f"Hand a task to the {label} agent and get its answer."
        told += " The task must be complete and self-contained: it sees nothing else."
        return PydanticTool(run_sub_agent, name=label, description=told)

    def _drive(
        self,
        model: Any,
        tools: Mapping[str, Tool],
        task: str,
        budgets: Budgets,
        journal: Journal,
        **options: Any,
    ) -> AgentResult:
        """runner.core.loop.drive's part for a Pydantic AI agent: its own loop, journaled."""
        return drive_foreign(
            tools, task, budgets, journal, options, self._run, _stop_for, self.stream
        )

    async def _run(self, run: ForeignRun, task: str) -> Any:
        try:
            journaled = _Journaled(run, self.mcp_idempotent, self.stream, self.sync_functions)
            # The framework's sync functions (tools, a sync model function) on threads kept
            # between calls, where a tool call is also journaled (`_ToolCall`).
            with PydanticAgent.using_thread_executor(_THREADS):
                result = await self.agent.run(task, deps=self.deps, capabilities=[journaled])
        except BaseExceptionGroup as group:  # a task group's: the first of ours inside
            raise _first_of(group) from None
        return pydantic_core.to_jsonable_python(result.output)


def _stop_for(_run: ForeignRun, exc: Exception) -> StopReason | None:
    if isinstance(exc, UsageLimitExceeded):
        return _usage_reason(exc)
    if isinstance(exc, UnexpectedModelBehavior):
        # Its tool or output retries ran out: the nearest of runner's is a streak of failed
        # steps.
        return StopReason.TOOL_ERRORS
    return None


def wrap(agent: PydanticAgent[Any, Any]) -> RunnerAgent:
    """A Pydantic AI agent under runner's defaults: what `runner run file.py:agent` does
    when `agent` is the Pydantic AI `Agent` itself (runner.core.agent.load_agent)."""
    return RunnerAgent(agent)


@dataclass
class _FrameworkModel:
    """The RunnerAgent's `model`: never called (the framework asks its own model), it names
    that model for traces."""

    agent: PydanticAgent[Any, Any]

    @property
    def model(self) -> str | None:
        model = self.agent.model
        return model if isinstance(model, str) or model is None else model.model_name

    def __call__(self, transcript: list[dict[str, Any]]) -> Any:
        raise ModelFatal("a Pydantic AI agent's model is asked through its own loop")


class _Journaled(AbstractCapability[Any]):
    """The capability each run of a RunnerAgent gets: its model requests, tool calls and
    approvals go through the run's journal."""

    def __init__(
        self,
        run: ForeignRun,
        mcp_idempotent: Mapping[str, bool],
        stream: bool = False,
        sync_functions: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.run = run
        self.mcp_idempotent = mcp_idempotent
        self.stream = stream
        self.sync_functions = sync_functions or {}

    async def wrap_model_request(
        self, ctx: Any, *, request_context: ModelRequestContext, handler: Any
    ) -> pm.ModelResponse:
        if not self.run.listings_checked:
            listings = _mcp_listings(request_context.model_request_parameters.function_tools)
            unknown = sorted(set(self.mcp_idempotent) - set(listings))
            if unknown:
                raise ValueError(f"idempotent names no tool of the agent: {', '.join(unknown)}")
            if listings or self.run.listings is not None:
                await asyncio.to_thread(self.run.listed, listings)  # it writes, or may
            else:
                self.run.listed(listings)  # no listing before or now: nothing to write
        returned, retry = _returned(request_context.messages)
        # On the loop, not a thread: both read what this process holds (a write only when the
        # step before has something to settle, or messages came), and two hops to a thread
        # and back cost more than that on a busy machine (docs/performance/pydantic-ai.md).
        recorded = self.run.recorded_reply(returned, retry)
        heard = self.run.heard()
        if heard and request_context.messages:
            # As user turns of the request about to go, kept in the run's history after it.
            last = request_context.messages[-1]
            if isinstance(last, pm.ModelRequest):
                last.parts = [*last.parts, *(pm.UserPromptPart(_said(m)) for m in heard)]
        if recorded is not None:
            return _response_of(recorded, request_context)
        params = request_context.model_request_parameters

        async def request(pieces: Pieces | None) -> pm.ModelResponse:
            try:
                if self.stream:
                    return await _streamed(ctx, request_context, pieces)
                response: pm.ModelResponse = await handler(request_context)
            except ModelHTTPError as exc:
                if 400 <= exc.status_code < 500 and exc.status_code not in (408, 409, 429):
                    raise ModelFatal(f"{type(exc).__name__}: {exc}") from None
                raise
            return response

        def reply_of(response: pm.ModelResponse) -> tuple[Reply, pm.ModelResponse]:
            return _reply_of(response, params), response

        if not self.stream and self.run.asks_on_loop():
            # Its first attempt awaited here, no thread between (ForeignRun.ask_on_loop).
            asked: pm.ModelResponse = await self.run.ask_on_loop(
                request, reply_of, request_context.messages
            )
            return asked
        response: pm.ModelResponse = await asyncio.to_thread(
            self.run.ask, request, reply_of, request_context.messages, asyncio.get_running_loop()
        )
        return response

    async def wrap_tool_execute(
        self, ctx: Any, *, call: pm.ToolCallPart, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        recorded = self.run.recorded_outcome(call.tool_call_id)  # in memory: on the loop
        if recorded is not None:
            return _replayed(recorded)
        function = self.sync_functions.get(call.tool_name)
        if (
            function is not None
            and not _is_mcp(tool_def)
            and self.run.runs_live(call.tool_call_id)
            and _threads_in_use()
        ):
            return await self._on_its_thread(call, function, args, handler)
        loop = asyncio.get_running_loop()
        raised: list[BaseException] = []
        returned: list[Any] = []

        def execute(**_args: Any) -> str:  # the args are the validated ones, bound here
            future = asyncio.run_coroutine_threadsafe(handler(args), loop)
            try:
                value = future.result()
            except Exception as exc:
                raised.append(exc)
                raise
            returned.append(value)
            return _text_of(value)

        declared = _mcp_declaration(tool_def, self.mcp_idempotent)
        outcome = await asyncio.to_thread(self.run.call, call.tool_call_id, execute, declared)
        if raised and isinstance(raised[0], ModelRetry):
            raise raised[0]  # the framework counts its retries as it would unwrapped
        if returned and not outcome.is_error:
            return returned[0]
        return _replayed(outcome)

    async def _on_its_thread(
        self, call: pm.ToolCallPart, function: Callable[..., Any], args: Any, handler: Any
    ) -> Any:
        """A sync function tool's live call: the framework runs it on one of `_THREADS`,
        which journals it there (`_ToolCall`): no thread of runner's own between, and its
        outcome committed before the framework hears of it."""
        here = _ToolCall(self.run, call.tool_call_id, function)
        token = _HERE.set(here)
        try:
            value = await handler(args)
        except _Settled:
            assert here.outcome is not None
            return _replayed(here.outcome)
        except Exception as exc:
            if here.outcome is None:
                return await self._journal_after(call, None, exc)
            if isinstance(exc, ModelRetry):
                raise
            return _replayed(here.outcome)
        finally:
            _HERE.reset(token)
        if here.outcome is None:
            return await self._journal_after(call, value, None)
        return _replayed(here.outcome) if here.outcome.is_error else value

    async def _journal_after(self, call: pm.ToolCallPart, value: Any, exc: Exception | None) -> Any:
        """The tool call's outcome journaled after the framework ended it without its function
        on one of `_THREADS` (a hook answered for it, or the user's own executor ran it)."""

        def ended(**_args: Any) -> str:
            if exc is not None:
                raise exc
            return _text_of(value)

        outcome = await asyncio.to_thread(self.run.call, call.tool_call_id, ended)
        if isinstance(exc, ModelRetry):
            raise exc
        if exc is None and not outcome.is_error:
            return value
        return _replayed(outcome)

    async def handle_deferred_tool_calls(
        self, ctx: Any, *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        if not requests.approvals:
            return None
        ids = [call.tool_call_id for call in requests.approvals]
        answers = await asyncio.to_thread(self.run.approvals, ids)
        return DeferredToolResults(
            approvals={
                call_id: True if denial is None else ToolDenied(denial)
                for call_id, denial in answers.items()
            }
        )


async def _streamed(
    ctx: Any, request_context: ModelRequestContext, pieces: Pieces | None
) -> pm.ModelResponse:
    """The request through the model's streaming path, each piece handed to `pieces` as it
    comes: the whole response once the stream ends."""
    rc = request_context
    model = rc.model
    async with model.request_stream(
        rc.messages, rc.model_settings, rc.model_request_parameters, ctx
    ) as streamed:
        async for event in streamed:
            if pieces is not None:
                _show(event, pieces)
    return streamed.get()


def _show(event: Any, pieces: Pieces) -> None:
    """A stream event's text, or a piece of a call's arguments, to the run's followers."""
    if isinstance(event, pm.PartStartEvent):
        part = event.part
        if isinstance(part, pm.TextPart):
            pieces.text(part.content)
        elif isinstance(part, pm.ToolCallPart) and isinstance(part.args, str):
            pieces.arguments(event.index, part.args, part.tool_name)
    elif isinstance(event, pm.PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, pm.TextPartDelta):
            pieces.text(delta.content_delta)
        elif isinstance(delta, pm.ToolCallPartDelta) and isinstance(delta.args_delta, str):
            pieces.arguments(event.index, delta.args_delta, delta.tool_name_delta)


def _declarations(
    agent: PydanticAgent[Any, Any], idempotent: set[str], has_mcp: bool
) -> dict[str, Tool]:
    """Each function tool's runner declaration: `@durable`'s, or idempotent if named. With
    MCP toolsets, names that are no function tool's are left to check against their lists."""
    declared: dict[str, Tool] = {}
    for toolset in agent.toolsets:
        if not isinstance(toolset, FunctionToolset):
            continue
        for name, tool in toolset.tools.items():
            own = getattr(tool.function, _DECLARED, None)
            base = own if isinstance(own, Tool) else Tool(tool.function)
            if name in idempotent:
                base = replace(base, idempotent=True)
            # Only the declaration is runner's: Pydantic AI validates and calls the tool.
            declared[name] = replace(base, fn=_declared)
    unknown = sorted(idempotent - set(declared))
    if unknown and not has_mcp:
        raise ValueError(f"idempotent names no tool of the agent: {', '.join(unknown)}")
    return declared


def _sync_functions(agent: PydanticAgent[Any, Any]) -> dict[str, Callable[..., Any]]:
    """The agent's sync function tools, by name: the framework runs each in a thread."""
    found: dict[str, Callable[..., Any]] = {}
    for toolset in agent.toolsets:
        if not isinstance(toolset, FunctionToolset):
            continue
        for name, tool in toolset.tools.items():
            declared = getattr(tool.function, _DECLARED, None)
            if isinstance(declared, Tool) and declared.sub_agent is not None:
                continue  # it parks its run for a child run: ForeignRun.call's own path
            if not tool.function_schema.is_async:
                found[name] = tool.function_schema.function
    return found


class _Settled(Exception):
    """A tool call settled without its function running (a crash left it pending): raised
    from its thread to `wrap_tool_execute`, which hands the framework the recorded outcome."""


class _ToolCall:
    """A live call of a sync function tool, for the thread the framework runs it on: that
    thread journals it (`ForeignRun.call`: the tool run under runner's declaration, its
    outcome committed), then hands the framework what the function returned or raised."""

    def __init__(self, run: ForeignRun, call_id: str, function: Callable[..., Any]) -> None:
        self.run = run
        self.call_id = call_id
        self.function = function
        self.taken = False
        self.outcome: Outcome | None = None

    def takes(self, call: Callable[[], Any]) -> bool:
        """Whether `call` (the framework's partial of the function) is this tool call's."""
        if self.taken or getattr(call, "func", None) is not self.function:
            return False
        self.taken = True
        return True

    def journaled(self, call: Callable[[], Any]) -> Any:
        raised: list[Exception] = []
        returned: list[Any] = []

        def tool(**_args: Any) -> str:  # the framework bound the validated args already
            try:
                value = call()
            except Exception as exc:
                raised.append(exc)
                raise
            returned.append(value)
            return _text_of(value)

        self.outcome = self.run.call(self.call_id, tool)
        if raised:
            raise raised[0]  # as the function raised it: `wrap_tool_execute` maps it
        if returned and not self.outcome.is_error:
            return returned[0]
        raise _Settled


# The tool call in flight in this task, for the thread its function runs on.
_HERE: contextvars.ContextVar[_ToolCall | None] = contextvars.ContextVar(
    "runner_pydantic_ai_tool_call", default=None
)


class _Threads(KeptThreads):
    """Threads for a RunnerAgent's sync functions; a live tool call's is journaled on it."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if runs_in_context(fn) is not None and len(args) == 1 and not kwargs:
            return super().submit(fn, _on_thread, args[0])  # `_on_thread` in that context
        return super().submit(fn, *args, **kwargs)


def _on_thread(call: Callable[[], Any]) -> Any:
    here = _HERE.get()
    if here is None or not here.takes(call):
        return call()
    return here.journaled(call)


_THREADS = _Threads()


def _threads_in_use() -> bool:
    """Whether the framework hands its sync functions to `_THREADS` here (not to the user's
    own executor, nor inline): read from Pydantic AI's own settings, None if it moved them."""
    from pydantic_ai import _utils

    executor = getattr(_utils, "_thread_executor", None)
    inline = getattr(_utils, "_disable_threads", None)
    if executor is None or inline is None:
        return False
    return executor.get() is _THREADS and not inline.get()


# The keys Pydantic AI's MCPToolset puts in each of its tools' definitions (`metadata`): the
# MCP tool's `_meta`, its annotations and whether it runs as an MCP task.
_MCP_METADATA = frozenset({"meta", "annotations", "task"})


def _is_mcp(tool_def: Any) -> bool:
    metadata = getattr(tool_def, "metadata", None)
    return isinstance(metadata, dict) and set(metadata) >= _MCP_METADATA


def _mcp_listings(tool_defs: Iterable[Any]) -> dict[str, Any]:
    """What the servers list for the MCP tools among these definitions, by the name the
    model calls each (as `runner.mcp` journals its tools)."""
    return {
        tool_def.name: {
            "name": tool_def.name,
            "description": tool_def.description,
            "inputSchema": tool_def.parameters_json_schema,
            "annotations": tool_def.metadata["annotations"],
        }
        for tool_def in tool_defs
        if _is_mcp(tool_def)
    }


def _mcp_declaration(tool_def: Any, idempotent: Mapping[str, bool]) -> Tool | None:
    """An MCP tool's declaration, by its annotations (or the user's word); None for others."""
    if not _is_mcp(tool_def):
        return None
    settled = settlement_of(tool_def.metadata["annotations"], idempotent.get(tool_def.name))
    return Tool(_declared, idempotent=settled.idempotent)


def _key_mcp_calls(agent: PydanticAgent[Any, Any]) -> bool:
    """Make each MCP toolset of the agent send runner's `_meta` (the call's key, run and
    attempt) with every call, beside what its own `process_tool_call` adds: whether it has
    any."""
    try:
        from pydantic_ai.mcp import MCPToolset
    except ImportError:  # no MCP client installed: no MCP toolset either
        return False
    found: list[Any] = []

    def visit(toolset: Any) -> None:
        if isinstance(toolset, MCPToolset):
            found.append(toolset)

    for toolset in agent.toolsets:
        toolset.apply(visit)
    for toolset in found:
        if not getattr(toolset.process_tool_call, _KEYED, False):
            toolset.process_tool_call = _keyed(toolset.process_tool_call)
    return bool(found)


_KEYED = "__runner_keyed__"


def _keyed(inner: Any) -> Any:
    """A `process_tool_call` that adds runner's `_meta` to the call, then does what `inner`
    (the toolset's own, if any) does."""

    async def process(ctx: Any, call_tool: Any, name: str, args: dict[str, Any]) -> Any:
        ours = call_meta()

        async def keyed(name: str, args: dict[str, Any], *, metadata: Any = None) -> Any:
            return await call_tool(name, args, metadata={**(metadata or {}), **ours} or None)

        if inner is not None:
            return await inner(ctx, keyed, name, args)
        return await keyed(name, args)

    setattr(process, _KEYED, True)
    return process


def _declared(**args: Any) -> Any:
    """A declaration's stand-in function: Pydantic AI calls the tool itself."""
    raise NotImplementedError("a Pydantic AI tool is called through its agent")


def _returned(messages: list[pm.ModelMessage]) -> tuple[dict[str, Outcome], str | None]:
    """What the request about to be sent says of the last step: each call's outcome as the
    framework shows it, by call id, and its complaint about a reply with no call."""
    outcomes: dict[str, Outcome] = {}
    retry = None
    if not messages or not isinstance(messages[-1], pm.ModelRequest):
        return outcomes, retry
    for part in messages[-1].parts:
        if isinstance(part, pm.ToolReturnPart):
            outcomes[part.tool_call_id] = Outcome(part.model_response_str(), False)
        elif isinstance(part, pm.RetryPromptPart):
            if part.tool_name is None:
                retry = part.model_response()
            else:
                outcomes[part.tool_call_id] = Outcome(part.model_response(), True)
    return outcomes, retry


def _reply_of(response: pm.ModelResponse, params: ModelRequestParameters) -> Reply:
    """A model response in the journal's terms."""
    outputs = {tool.name for tool in params.output_tools}
    texts = [part.content for part in response.parts if isinstance(part, pm.TextPart)]
    calls = []
    output_call = None
    for part in response.parts:
        if not isinstance(part, pm.ToolCallPart):
            continue
        call = Call(part.tool_name, _args_of(part), part.tool_call_id)
        if part.tool_name in outputs:
            output_call = output_call or call
        else:
            calls.append(call)
    usage = response.usage
    return Reply(
        text="".join(texts) or None,
        calls=tuple(calls),
        output_call=output_call,
        tokens=usage.input_tokens + usage.output_tokens,
        cost=_cost_of(response),
        raw=_whole(response) if _says_more(response) else None,
    )


def _says_more(response: pm.ModelResponse) -> bool:
    """Whether the response holds parts a `Reply` does not say, that the provider may be sent
    again: thinking (and its signature), built-in tool calls, files, or the provider's ids
    of its text and calls (the Responses API's item ids)."""
    for part in response.parts:
        if not isinstance(part, pm.TextPart | pm.ToolCallPart):
            return True
        if part.id is not None or part.provider_details:
            return True
    return False


def _whole(response: pm.ModelResponse) -> Any:
    """The response as Pydantic AI's own JSON, less what a run fills in again when it is
    handed back (its run's ids)."""
    whole = pm.ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]
    for filled in ("run_id", "conversation_id"):
        whole.pop(filled, None)
    return whole


def _cost_of(response: pm.ModelResponse) -> float:
    """What the response cost in USD, by Pydantic AI's price table (genai-prices): 0 for a
    model it does not price (then `max_cost` cannot stop the run)."""
    try:
        return float(response.cost().total_price)
    except Exception:
        return 0.0


def _response_of(reply: Reply, request_context: ModelRequestContext) -> pm.ModelResponse:
    """The journal's reply as the response the framework first got."""
    if reply.raw is not None:  # kept whole: its thinking, signatures and ids as they came
        return pm.ModelMessagesTypeAdapter.validate_python([reply.raw])[0]  # type: ignore[return-value]
    parts: list[pm.ModelResponsePart] = []
    if reply.text:
        parts.append(pm.TextPart(reply.text))
    for call in (*reply.calls, *((reply.output_call,) if reply.output_call else ())):
        # The arguments as JSON text, as providers send them (Python's separators, the
        # common form): the dict the journal keeps does not remember the provider's bytes.
        args = call.args.get("_unparsed") if set(call.args) == {"_unparsed"} else None
        text = args if isinstance(args, str) else json.dumps(call.args)
        parts.append(pm.ToolCallPart(call.tool, text, tool_call_id=call.id or ""))
    return pm.ModelResponse(
        parts=parts,
        usage=RequestUsage(input_tokens=reply.tokens),
        model_name=request_context.model.model_name,
    )


def _said(message: Any) -> str:
    """A message sent to the run, as the user turn the model reads."""
    return message if isinstance(message, str) else json.dumps(message)


def _args_of(part: pm.ToolCallPart) -> dict[str, Any]:
    try:
        return part.args_as_dict(raise_if_invalid=True)
    except Exception:
        return {"_unparsed": part.args if isinstance(part.args, str) else repr(part.args)}


def _text_of(value: Any) -> str:
    """A tool's return value as the journal keeps it: text as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return pydantic_core.to_json(value).decode()
    except Exception:
        return str(value)


def _replayed(outcome: Outcome) -> Any:
    """A recorded outcome handed back to the framework: its text, or a failure the model is
    shown (ModelRetry, as a tool raising would be)."""
    if outcome.is_error:
        raise ModelRetry(outcome.content)
    return outcome.content


def _usage_reason(exc: UsageLimitExceeded) -> StopReason:
    """The runner stop nearest to a Pydantic AI usage limit."""
    return StopReason.TOKEN_BUDGET if "token" in str(exc).lower() else StopReason.MAX_STEPS


def _first_of(group: BaseExceptionGroup[Any]) -> BaseException:
    for exc in group.exceptions:
        inner = _first_of(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if not isinstance(inner, asyncio.CancelledError):
            return inner
    return group
