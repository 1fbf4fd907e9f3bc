"""`AnthropicMessages`: the Messages API through the official `anthropic` SDK."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runner.errors import ModelRetryable
from runner.models.adapter import DEFAULT_TOTAL_TIMEOUT, Adapter
from runner.models.pricing import PriceLike, Tokens, count
from runner.models.streams import MessageEvents
from runner.models.turns import (
    Call,
    Calls,
    Result,
    Text,
    Turn,
    final_action,
    invalid_action,
    read_transcript,
    tool_action,
)

# The Messages API refuses an empty text block; an empty task or answer is sent as this.
EMPTY_TEXT = "(empty)"
DEFAULT_MAX_TOKENS = 4096


class AnthropicMessages(Adapter):
    """A model callable over the Messages API: `Agent(model=AnthropicMessages("claude-..."))`.

    `api_key` and `base_url` default to the SDK's own (ANTHROPIC_API_KEY,
    ANTHROPIC_BASE_URL, ...); `client` is an `anthropic.Anthropic` to use instead (its
    retries are turned off: runner's `model_retries` are the only ones). `system` is the
    system prompt, `max_tokens` the output limit of each call, `price` the dollars per
    million tokens (a `Price`, or `(input, output)`), else genai-prices' table by model when
    it is installed (behind a proxy or gateway too), else cost 0 marked unknown.
    `price_table=False` says the table's prices do not apply to this server: without
    `price`, the cost is unknown. `secrets` are more strings (a gateway's token, a
    header's value) never to be repeated in an error: the key is never repeated either.
    `total_timeout` (600 s by default; None: none) is how long one call may take in all, the
    body included: past it the call is given up and retried like a timeout. `stream=True`:
    each response through the SDK's streaming API, its pieces handed to the run's followers
    (runner.core.deltas), the action the same. Other keywords (`tool_choice`,
    `stop_sequences`, `timeout`, `extra_body`, ...) go to every `messages.create` call.
    `limit` names the provider limit its calls draw from (default `anthropic/<model>`).
    """

    provider = "anthropic"
    official_host = "api.anthropic.com"

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
        max_tokens: int = DEFAULT_MAX_TOKENS,
        total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT,
        limit: str | None = None,
        price_table: bool = True,
        **request_params: Any,
    ) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a whole number >= 1, not {max_tokens!r}")
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
        self.max_tokens = max_tokens

    def request(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        for turn in read_transcript(transcript):
            role = "assistant" if isinstance(turn, Calls) else _role(turn)
            blocks = _blocks(turn)
            if messages and messages[-1]["role"] == role:
                # One turn per role: tool results first, then any text the runner adds.
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": role, "content": blocks})
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
        }
        if self.system:
            request["system"] = self.system
        if self.tools:
            request["tools"] = [
                {
                    "name": spec.name,
                    **({"description": spec.description} if spec.description else {}),
                    "input_schema": spec.parameters,
                }
                for spec in self.tools
            ]
        request.update(self.request_params)
        return request

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        content = body.get("content")
        if body.get("type") == "error" or not isinstance(content, list):
            raise _malformed(body)
        usage = self._pricer.usage(str(body.get("model") or self.model), _tokens(body))
        blocks = [block for block in content if isinstance(block, dict)]
        text = "".join(
            b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        stop = body.get("stop_reason")
        if stop == "refusal":
            return invalid_action(
                f"the model refused: {text}" if text else "the model refused", usage
            )
        if stop in ("max_tokens", "model_context_window_exceeded"):
            return invalid_action(
                f"the response was cut off at its token limit (stop_reason {stop!r}): "
                "reply with less",
                usage,
            )
        calls: list[Call] = []
        for block in blocks:
            if block.get("type") != "tool_use":
                continue
            name, args, call_id = block.get("name"), block.get("input"), block.get("id")
            if not isinstance(name, str) or not isinstance(args, dict):
                return invalid_action(
                    "a tool_use block of the response has no name or input", usage
                )
            calls.append(Call(call_id if isinstance(call_id, str) else "", name, args))
        if calls:
            return tool_action(calls, text or None, usage)
        if text:
            return final_action(text, usage)
        return invalid_action("the model returned an empty response", usage)

    def _make_client(self, sdk: Any) -> Any:
        return sdk.Anthropic(api_key=self._api_key, base_url=self._base_url, max_retries=0)

    def _stream(self, client: Any, request: dict[str, Any]) -> Any:
        return client.messages.with_streaming_response.create(**request)

    def _events(self, client: Any, request: dict[str, Any]) -> Any:
        return client.messages.create(**request, stream=True)

    def _assembler(self) -> MessageEvents:
        return MessageEvents()

    def _sdk_error(self) -> type[Exception]:
        error: type[Exception] = self._sdk.AnthropicError
        return error


def _role(turn: Turn) -> str:
    if isinstance(turn, Text):
        return turn.role
    return "user"  # a tool result is the user's turn in the Messages API


def _blocks(turn: Turn) -> list[dict[str, Any]]:
    if isinstance(turn, Text):
        return [{"type": "text", "text": turn.text or EMPTY_TEXT}]
    if isinstance(turn, Result):
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": turn.call.id}
        if turn.content:
            block["content"] = turn.content
        if turn.is_error:
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = []
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.args}
        for call in turn.calls
    ]
    return blocks


def _tokens(body: dict[str, Any]) -> Tokens:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return Tokens()
    # The API counts cache reads and writes apart from input_tokens: all three are input.
    read, written = (
        count(usage.get("cache_read_input_tokens")),
        count(usage.get("cache_creation_input_tokens")),
    )
    return Tokens(
        input=count(usage.get("input_tokens")) + read + written,
        output=count(usage.get("output_tokens")),
        cached=read,
        cache_write=written,
    )


def _malformed(body: dict[str, Any]) -> Exception:
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return ModelRetryable(f"anthropic API returned an error: {error['message']}")
    return ModelRetryable("anthropic API returned a response without content")
