"""An OpenAI Agents SDK agent, unchanged, made durable by runner (docs/guides/openai-agents.md).

The shop agent is plain Agents SDK: two function tools, one of them needing a person's
approval (`needs_approval=True`). `agent` is the same agent under runner's `RunnerAgent`:

    runner run examples/agents_sdk_shop.py:agent "Refund order 1042" --id sdk-1  # exits 4
    runner approve sdk-1 --call sdk-1-2
    runner resume sdk-1

The model is scripted (a small `agents.Model`: no network, no key): it looks the order up,
asks for the refund, then says what happened. Set SHOP_MODEL=gpt-4.1-mini (and
OPENAI_API_KEY) to run the same agent on a real model. SHOP_PAUSE=N makes lookup_order wait N
seconds, after writing `<run id>.paused`, so a demo can kill the process mid-tool.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from runner import current_call
from runner.integrations.openai_agents import RunnerAgent

ORDERS = {"1042": 249.0, "1043": 35.0}
REFUNDS: dict[str, str] = {}  # idempotency key -> receipt: what a payment API remembers


class Scripted(Model):
    """Look the order up, refund what was paid, then say what happened."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any):
        outputs = [
            item["output"]
            for item in (input if isinstance(input, list) else [])
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if not outputs:
            output: Any = self.call("lookup_order", {"order": "1042"}, "call_lookup")
        elif len(outputs) == 1:
            paid = float(str(outputs[0]).split()[-1])
            output = self.call("refund", {"order": "1042", "amount": paid}, "call_refund")
        else:
            text = ResponseOutputText(
                text=f"Done: {outputs[-1]}.", type="output_text", annotations=[]
            )
            output = ResponseOutputMessage(
                id="msg_1", content=[text], role="assistant", status="completed", type="message"
            )
        usage = Usage(requests=1, input_tokens=50, output_tokens=10, total_tokens=60)
        return ModelResponse(output=[output], usage=usage, response_id=None)

    @staticmethod
    def call(name: str, args: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(
            arguments=json.dumps(args), call_id=call_id, name=name, type="function_call"
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def lookup_order(order: str) -> str:
    """What was paid for an order."""
    pause = float(os.environ.get("SHOP_PAUSE", "0"))
    call = current_call()
    if pause and call is not None:
        Path(f"{call.run_id}.paused").touch()
        time.sleep(pause)
    return f"order {order} paid {ORDERS[order]}"


@function_tool(needs_approval=True)
def refund(order: str, amount: float) -> str:
    """Refund an amount on an order (a person approves every refund)."""
    call = current_call()
    key = call.idempotency_key if call is not None else f"{order}-{amount}"
    # A real payment API deduplicates on the key: a call run again after a crash pays once.
    return REFUNDS.setdefault(key, f"refunded {amount:.2f} on order {order}")


shop = Agent(
    name="shop",
    instructions="Look the order up before refunding what was paid for it.",
    tools=[lookup_order, refund],
    model=os.environ.get("SHOP_MODEL") or Scripted(),
)

# lookup_order only reads: after a crash in the middle of it, it is simply run again.
agent = RunnerAgent(shop, idempotent={"lookup_order"}, max_steps=8)
