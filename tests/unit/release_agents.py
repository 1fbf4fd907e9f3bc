"""A refund agent whose code a test redeploys: `make` builds it from the module's current
`RELEASE` and `LOOKUP` (the name of its lookup tool), as a worker loads it by reference
(self-contained: the loader imports this file by its path)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runner import Agent, tool

RELEASE = "1"
LOOKUP = "lookup"


@tool(idempotent=True)
def look(order: str) -> str:
    return f"order {order}: paid 249.00"


@tool(approval=True)
def pay(order: str, amount: float, idempotency_key: str) -> str:
    return f"refunded {amount:.2f} on {order}"


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    order = re.findall(r"\d{4}", str(transcript[0]["content"]))[0]
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": LOOKUP, "args": {"order": order}}
    if len(seen) == 1:
        return {"type": "tool", "name": "pay", "args": {"order": order, "amount": 249.0}}
    return {"type": "final", "content": str(seen[-1]["content"])}


def make() -> Agent:
    return Agent(model, {LOOKUP: look, "pay": pay}, name="refunds", release=RELEASE)


REF = f"{Path(__file__).resolve()}:make"
