"""An agent whose tools come from an MCP server (examples/mcp_shop_server.py, over stdio).

A scripted "model" (no network, no API key): it checks the stock, places the order, and
answers with what happened. If a crash cut the order short, the resumed run is told the
outcome is unknown (`place_order` is destructive: runner never calls it twice on its own),
and says so instead of ordering again:

    runner run examples/mcp_shop.py:agent "Order 2 tea"
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from runner import Agent
from runner.mcp import mcp_tools

SERVER = Path(__file__).with_name("mcp_shop_server.py")


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    found = re.search(r"(\d+) (\w+)", str(transcript[0]["content"]))
    quantity, item = (int(found.group(1)), found.group(2)) if found else (1, "tea")
    seen = [m for m in transcript if m["role"] == "tool"]
    if not seen:
        return {"type": "tool", "name": "shop_stock", "args": {"item": item}}
    if len(seen) == 1:
        args = {"item": item, "quantity": quantity}
        return {"type": "tool", "name": "shop_place_order", "args": args}
    last = seen[-1]
    if str(last["content"]).startswith("OutcomeUnknown"):
        answer = f"I cannot tell whether the order of {quantity} {item} went through: check it."
        return {"type": "final", "content": answer}
    return {"type": "final", "content": f"Done: {last['content']}."}


def agent() -> Agent:
    """Built when a process loads it: the server is asked for its tools then."""
    pause = {"SHOP_PAUSE": os.environ.get("SHOP_PAUSE", "0")}
    tools = mcp_tools([sys.executable, str(SERVER)], env=pause, prefix="shop_")
    return Agent(model, tools, name="shop")
