"""A refund agent that waits for a person before it pays out more than 100.

A scripted "model" (no network, no API key): it looks the order up, asks for the refund,
and answers with what happened. `refund` needs a person's approval when the amount is over
100, so the run stops there and waits, holding no worker, until someone answers:

    runner run examples/refund.py:agent "Refund order 1042: the parcel never came"  # exits 4
    runner approve ID --call ID-2          # or: runner deny ID --call ID-2 --reason "..."
    runner resume ID                       # or let a `runner worker` take it

Order 1043 costs 35: its refund needs no approval and the run goes straight through. If
the model is unsure, it could also ask a person (`runner.ask_human`, answered with `runner
reply`): this one asks when the task names no order.
"""

from __future__ import annotations

import re
from typing import Any

from runner import Agent, ask_human, tool

ORDERS = {"1042": 249.0, "1043": 35.0}
REFUNDS: dict[str, str] = {}  # idempotency key -> receipt: what a payment API remembers


@tool(idempotent=True)
def lookup_order(order: str) -> str:
    """Look an order up: what was paid for it."""
    if order not in ORDERS:
        raise KeyError(f"no order {order}")
    return f"order {order}: paid {ORDERS[order]:.2f} EUR, not delivered"


@tool(approval=lambda args: float(args.get("amount", 0)) > 100)
def refund(order: str, amount: float, idempotency_key: str) -> str:
    """Refund an amount on an order (a person approves refunds over 100)."""
    # A real payment API deduplicates on the key: a call re-run after a crash pays once.
    receipt = REFUNDS.setdefault(idempotency_key, f"refunded {amount:.2f} EUR on order {order}")
    return receipt


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    task = str(transcript[0]["content"])
    seen = [m for m in transcript if m["role"] == "tool"]
    usage = {"tokens": 50 + 10 * len(transcript), "cost": 0.0002}
    found = re.search(r"\b(\d{4})\b", task)
    if found is None:
        if not seen:
            question = "Which order number should I refund?"
            return {"type": "tool", "name": "ask_human", "args": {"question": question}}
        found = re.search(r"\b(\d{4})\b", str(seen[0]["content"]))
        if found is None:
            return {"type": "final", "content": "I need an order number.", "usage": usage}
        seen = seen[1:]
    order = found.group(1)

    def call(name: str, **args: Any) -> dict[str, Any]:
        return {"type": "tool", "name": name, "args": args, "usage": usage}

    if not seen:
        return call("lookup_order", order=order)
    if seen[0]["is_error"]:
        return {"type": "final", "content": f"I found no order {order}.", "usage": usage}
    if len(seen) == 1:
        paid = float(re.findall(r"\d+\.\d+", str(seen[0]["content"]))[0])
        return call("refund", order=order, amount=paid)
    outcome = str(seen[1]["content"])
    if seen[1]["is_error"]:
        return {"type": "final", "content": f"No refund for {order}. {outcome}", "usage": usage}
    return {"type": "final", "content": f"Done: {outcome}.", "usage": usage}


agent = Agent(
    model,
    {"lookup_order": lookup_order, "refund": refund, "ask_human": ask_human},
    name="refunds",
    release="1.0",
)
