"""An MCP server for the tests, written with the official SDK's server side: three tools,
one read-only, one idempotent, one destructive, and one that answers with an error result.

Every call appends a line to the ledger (`MCP_LEDGER`), outside runner's database: the
tool, the idempotency key and attempt from the call's `_meta`, the arguments. A call of a
tool named in `MCP_HOLD`, or for which the file `MCP_LEDGER.hold-TOOL` exists (first
attempts only), then waits until the file `MCP_RELEASE`
exists: a test kills the caller while it waits.

With `MCP_EXTRA_TOOL` set it lists a fifth tool, `stock` (a server that changed its tools).

Run: `python ledger_server.py` (stdio) or `python ledger_server.py --http PORT`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

KEY_META = "runner/idempotency-key"  # runner.mcp.KEY_META, spelled out as a server would

server = MCPServer("ledger", log_level="WARNING")


async def ledgered(tool: str, ctx: Context, **args: Any) -> None:
    meta = dict(ctx.request_context.meta or {})
    line = {
        "tool": tool,
        "key": meta.get(KEY_META),
        "attempt": meta.get("runner/attempt"),
        "run": meta.get("runner/run-id"),
        "args": args,
        "pid": os.getpid(),
    }
    with open(os.environ["MCP_LEDGER"], "a") as ledger:
        ledger.write(json.dumps(line) + "\n")
    held = os.environ.get("MCP_HOLD", "").split(",")
    if Path(f"{os.environ['MCP_LEDGER']}.hold-{tool}").exists():  # asked by a running test
        held.append(tool)
    if tool in held and line["attempt"] == 1:
        release = Path(os.environ["MCP_RELEASE"])
        while not release.exists():  # the test kills the caller meanwhile
            await asyncio.sleep(0.02)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def lookup(item: str, ctx: Context) -> str:
    """Look an item's price up."""
    await ledgered("lookup", ctx, item=item)
    return f"{item} costs 5"


@server.tool(
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True)
)
async def put(item: str, price: int, ctx: Context) -> str:
    """Set an item's price."""
    await ledgered("put", ctx, item=item, price=price)
    return f"{item} now costs {price}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
async def charge(amount: int, ctx: Context) -> str:
    """Charge the customer's card."""
    await ledgered("charge", ctx, amount=amount)
    return f"charged {amount}"


@server.tool()
async def refund(amount: int, ctx: Context) -> str:
    """Refund the customer (no annotations: MCP reads it as destructive)."""
    await ledgered("refund", ctx, amount=amount)
    if amount > 100:
        raise ToolError(f"refund of {amount} is over the limit of 100")
    return f"refunded {amount}"


if os.environ.get("MCP_EXTRA_TOOL"):  # the server after a release that added a tool

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def stock(item: str, ctx: Context) -> str:
        """How many of an item are left."""
        await ledgered("stock", ctx, item=item)
        return f"{item}: 3 left"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
