"""The model wrapper of an OpenAI Agents SDK agent (runner.integrations.openai_agents): each
request goes through the run's journal (`ForeignRun.ask`), streamed or not, and the SDK's
responses become runner's `Reply` and back.

A response the journal holds is handed back as the SDK first got it (output items a reply does
not say, such as reasoning and the provider's item ids, kept whole), the model not asked again;
a streamed request's pieces reach the run's followers as they come and the journal records the
whole response once. A response's cost comes from genai-prices' table when it is installed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from agents import Usage
from agents.exceptions import AgentsException
from agents.items import ModelResponse
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.models.interface import Model
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
from runner.core.foreign import (
    Outcome,
    Pieces,
    Reply,
)
from runner.errors import ModelFatal

if TYPE_CHECKING:
    from runner.integrations.openai_agents_journaled import _Journaled


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


def _items_of(given: Any) -> list[Any]:
    """The SDK's input as a list of items (a first request's may be the bare task)."""
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


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
