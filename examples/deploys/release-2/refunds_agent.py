"""Release 2 of a refund agent, for docs/guides/deploys.md: it looks the order up with the
tool `find_order`, then refunds what was paid (a person approves refunds over 100).

A scripted "model" (no network, no API key). Release 1 (../release-1/) called the lookup
tool `lookup_order`: a run that release 1 started does not replay on this release.
"""

from __future__ import annotations

import re
from typing import Any

from runner import Agent, tool

ORDERS = {"1042": 249.0, "1043": 35.0}


@tool(idempotent=True)
def find_order(order: str) -> str:
    """What was paid for an order."""
    return f"order {order}: paid {ORDERS[order]:.2f} EUR"


@tool(approval=lambda args: float(args.get("amount", 0)) > 100)
def refund(order: str, amount: float, idempotency_key: str) -> str:
    """Refund an amount on an order (a person approves refunds over 100)."""
    return f"refunded {amount:.2f} EUR on order {order}"


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    order = re.findall(r"\d{4}", str(transcript[0]["content"]))[0]
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "find_order", "args": {"order": order}}
    if len(seen) == 1:
        paid = float(re.findall(r"\d+\.\d+", str(seen[0]["content"]))[0])
        return {"type": "tool", "name": "refund", "args": {"order": order, "amount": paid}}
    return {"type": "final", "content": f"Done: {seen[1]['content']}."}


agent = Agent(model, {"find_order": find_order, "refund": refund}, name="refunds", release="2")
