"""The OpenAI Agents SDK's responses and runner's `Reply`, each made from the other
(runner.integrations.openai_agents): a response as the journal records it, and a journaled
reply handed back as the SDK first got it (output items a reply does not say, such as
reasoning and the provider's item ids, kept whole); a model's stream read to its end; the
SDK's input read for the calls' outcomes; a response's cost by genai-prices' table when it
is installed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from agents import Usage
from agents.exceptions import AgentsException
from agents.items import ModelResponse
from agents.models.fake_id import FAKE_RESPONSES_ID
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
