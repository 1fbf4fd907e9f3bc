"""A Pydantic AI agent, unchanged, made durable by runner (docs/guides/pydantic-ai.md).

The shop agent is plain Pydantic AI: two tools, one of them needing a person's approval
(`requires_approval=True`). `agent` is the same agent under runner's `RunnerAgent`:

    runner run examples/pydantic_shop.py:agent "Refund order 1042" --id shop-1  # exits 4
    runner approve shop-1 --call shop-1-2
    runner resume shop-1

`runner run examples/pydantic_shop.py:shop "..."` (the Pydantic AI agent itself) works too,
wrapped with the defaults. The model is scripted (Pydantic AI's `FunctionModel`: no network,
no key): it looks the order up, asks for the refund, then says what happened. Set
SHOP_MODEL=openai:gpt-4.1-mini (and OPENAI_API_KEY) to run the same agent on a real model.
SHOP_PAUSE=N makes lookup_order wait N seconds, after writing `<run id>.paused`, so a demo
can kill the process mid-tool.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic_ai import Agent, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from runner import current_call
from runner.integrations.pydantic_ai import RunnerAgent

ORDERS = {"1042": 249.0, "1043": 35.0}
REFUNDS: dict[str, str] = {}  # idempotency key -> receipt: what a payment API remembers


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Look the order up, refund what was paid, then say what happened."""
    returns = [
        part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)
    ]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order": "1042"})])
    if len(returns) == 1:
        paid = float(str(returns[0].content).split()[-1])
        return ModelResponse(parts=[ToolCallPart("refund", {"order": "1042", "amount": paid})])
    return ModelResponse(parts=[TextPart(f"Done: {returns[-1].content}.")])


shop = Agent(
    os.environ.get("SHOP_MODEL") or FunctionModel(scripted),
    name="shop",
    instructions="Look the order up before refunding what was paid for it.",
)


@shop.tool_plain
def lookup_order(order: str) -> str:
    """What was paid for an order."""
    pause = float(os.environ.get("SHOP_PAUSE", "0"))
    call = current_call()
    if pause and call is not None:
        Path(f"{call.run_id}.paused").touch()
        time.sleep(pause)
    return f"order {order} paid {ORDERS[order]}"


@shop.tool_plain(requires_approval=True)
def refund(order: str, amount: float) -> str:
    """Refund an amount on an order (a person approves every refund)."""
    call = current_call()
    key = call.idempotency_key if call is not None else f"{order}-{amount}"
    # A real payment API deduplicates on the key: a call run again after a crash pays once.
    return REFUNDS.setdefault(key, f"refunded {amount:.2f} on order {order}")


# lookup_order only reads: after a crash in the middle of it, it is simply run again.
agent = RunnerAgent(shop, idempotent={"lookup_order"}, max_steps=8)
