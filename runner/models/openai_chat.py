"""`OpenAIChat`: the Chat Completions API through the official `openai` SDK.

Any OpenAI-compatible server works through `base_url` (Ollama, vLLM, LM Studio, gateways).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from runner.errors import ModelRetryable
from runner.models.adapter import DEFAULT_TOTAL_TIMEOUT, Adapter
from runner.models.pricing import PriceLike, Tokens, count
from runner.models.streams import ChatChunks
from runner.models.turns import (
    Call,
    Calls,
    Result,
    Text,
    arguments_json,
    final_action,
    invalid_action,
    read_transcript,
    tool_action,
)


class OpenAIChat(Adapter):
    """A model callable over Chat Completions: `Agent(model=OpenAIChat("gpt-4.1-mini"))`.

    `base_url` and `api_key` default to the SDK's own (OPENAI_BASE_URL, OPENAI_API_KEY);
    `client` is an `openai.OpenAI` to use instead (its retries are turned off: runner's
    `model_retries` are the only ones). `system` is the system prompt; `price` the dollars
    per million tokens (a `Price`, or `(input, output)`), else genai-prices' table by model
    when it is installed (behind a proxy or gateway too: OPENAI_BASE_URL elsewhere still
    gets the model's list price), else cost 0 marked unknown. `price_table=False` says the
    table's prices do not apply to this server (a local model, a server that bills its
    own way): without `price`, the cost is unknown. `secrets` are more strings (a gateway's token,
    a header's value) never to be repeated in an error: the key is never repeated either.
    `total_timeout` (600 s by default; None: none) is how long one call may take in all, the
    body included: past it the call is given up and retried like a timeout. `stream=True`:
    each response through the SDK's streaming API, its pieces handed to the run's followers
    (runner.core.deltas), the action the same. `limit` names the provider limit its calls
    draw from (default `openai/<model>`). Other keywords (`temperature`,
    `max_completion_tokens`, `parallel_tool_calls`, `timeout`, `extra_body`, ...) go to
    every `chat.completions.create` call.
    """

    provider = "openai"
    official_host = "api.openai.com"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        system: str | None = None,
        price: PriceLike | None = None,
        secrets: Iterable[str] = (),
        total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT,
        limit: str | None = None,
        price_table: bool = True,
        **request_params: Any,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            system=system,
            price=price,
            secrets=secrets,
            total_timeout=total_timeout,
            request_params=request_params,
            limit=limit,
            price_table=price_table,
        )
        # The output allowance a call reserves from its limit (runner.core.limits), if given.
        allowance = request_params.get("max_completion_tokens", request_params.get("max_tokens"))
        self.max_tokens: int | None = allowance if isinstance(allowance, int) else None

    def request(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        for turn in read_transcript(transcript):
            if isinstance(turn, Text):
                messages.append({"role": turn.role, "content": turn.text})
            elif isinstance(turn, Calls):
                messages.append(
                    {
                        "role": "assistant",
                        "content": turn.text,
                        "tool_calls": [_tool_call(call) for call in turn.calls],
                    }
                )
            elif isinstance(turn, Result):
                # Chat Completions has no error flag: the observation's text says so.
                messages.append(
                    {"role": "tool", "tool_call_id": turn.call.id, "content": turn.content}
                )
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.tools:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        **({"description": spec.description} if spec.description else {}),
                        "parameters": spec.parameters,
                    },
                }
                for spec in self.tools
            ]
        request.update(self.request_params)
        return request

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _malformed(body)
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise _malformed(body)
        usage = self._pricer.usage(str(body.get("model") or self.model), _tokens(body))
        refusal = message.get("refusal")
        if refusal:
            return invalid_action(f"the model refused: {refusal}", usage)
        finish = choice.get("finish_reason")
        if finish == "length":
            return invalid_action(
                "the response was cut off at its token limit (finish_reason 'length'): "
                "reply with less",
                usage,
            )
        if finish == "content_filter":
            return invalid_action("the provider's content filter stopped the response", usage)
        text = _content(message.get("content"))
        calls = _calls(message.get("tool_calls") or [])
        if isinstance(calls, str):
            return invalid_action(calls, usage)
        if calls:
            return tool_action(calls, text, usage)
        if text:
            return final_action(text, usage)
        return invalid_action("the model returned an empty response", usage)

    def _make_client(self, sdk: Any) -> Any:
        return sdk.OpenAI(api_key=self._api_key, base_url=self._base_url, max_retries=0)

    def _stream(self, client: Any, request: dict[str, Any]) -> Any:
        return client.chat.completions.with_streaming_response.create(**request)

    def _events(self, client: Any, request: dict[str, Any]) -> Any:
        # The usage comes in a last chunk only if asked for: the same as an unstreamed call's.
        options = {"stream_options": {"include_usage": True}}
        return client.chat.completions.create(**(options | request), stream=True)

    def _assembler(self) -> ChatChunks:
        return ChatChunks()

    def _sdk_error(self) -> type[Exception]:
        error: type[Exception] = self._sdk.OpenAIError
        return error


def _calls(tool_calls: object) -> list[Call] | str:
    """The response's function calls, or the error to show the model."""
    calls: list[Call] = []
    for n, raw in enumerate(tool_calls if isinstance(tool_calls, list) else [tool_calls]):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not isinstance(function, dict):
            return f"tool call {n + 1} of the response is not a function call"
        name = function.get("name")
        if not isinstance(name, str) or raw.get("type", "function") != "function":
            return f"tool call {n + 1} of the response is not a function call"
        arguments = function.get("arguments")
        try:
            args = json.loads(arguments) if arguments else {}
        except (TypeError, json.JSONDecodeError) as exc:
            return f"the arguments given to {name} are not valid JSON ({exc}): {arguments!r:.200}"
        if not isinstance(args, dict):
            return f"the arguments given to {name} must be a JSON object, not {arguments!r:.200}"
        call_id = raw.get("id")
        calls.append(Call(call_id if isinstance(call_id, str) else "", name, args))
    return calls


def _tool_call(call: Call) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments_json(call.args)},
    }


def _content(content: object) -> str | None:
    """A message's text: a string, or (from some servers) a list of text parts."""
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str)) or None
    return None


def _tokens(body: dict[str, Any]) -> Tokens:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return Tokens()
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Tokens(
        input=count(usage.get("prompt_tokens")),
        output=count(usage.get("completion_tokens")),
        cached=count(cached),
    )


def _malformed(body: dict[str, Any]) -> Exception:
    # Some compatible servers answer 200 with an error body: retry it like a 5xx.
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return ModelRetryable(f"openai API returned an error: {error['message']}")
    return ModelRetryable("openai API returned a response without a message")
