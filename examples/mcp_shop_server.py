"""A small shop as an MCP server (the official `mcp` SDK), for examples/mcp_shop.py.

Two tools: `stock` only reads (annotated read-only: a call cut short by a crash may simply
run again), `place_order` places an order (annotated destructive: it must never run twice
without a person deciding). Each order is appended to shop-orders.jsonl with the
idempotency key runner sent in the call's `_meta`, as a real shop would keep it to refuse
the same order twice.

`SHOP_PAUSE=N` makes `place_order` take N seconds after the order is written (time to kill
the run's process mid-call); the server stops when its client is gone.

Run by runner (stdio): `mcp_tools([sys.executable, "examples/mcp_shop_server.py"])`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

STOCK = {"tea": 12, "coffee": 3}
ORDERS = Path("shop-orders.jsonl")

shop = MCPServer("shop", log_level="WARNING")


@shop.tool(annotations=ToolAnnotations(readOnlyHint=True))
def stock(item: str) -> str:
    """How many of an item the shop has."""
    return f"{item}: {STOCK.get(item, 0)} in stock"


@shop.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
async def place_order(item: str, quantity: int, ctx: Context) -> str:
    """Order a quantity of an item (it is paid for at once)."""
    key = (ctx.request_context.meta or {}).get("runner/idempotency-key")
    with ORDERS.open("a") as orders:
        orders.write(json.dumps({"item": item, "quantity": quantity, "key": key}) + "\n")
    client = os.getppid()
    ends = time.monotonic() + float(os.environ.get("SHOP_PAUSE", "0"))
    while time.monotonic() < ends:
        if os.getppid() != client:
            os._exit(0)  # the client is gone: nobody will read the answer
        await asyncio.sleep(0.1)
    return f"ordered {quantity} x {item}"


if __name__ == "__main__":
    try:
        shop.run()
    except* BrokenPipeError:
        pass  # the client was killed: nobody reads what the server had left to say
