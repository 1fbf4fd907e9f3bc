"""The MCP server of benchmarks/mcp_call.py: one read-only tool, `echo`, that does nothing
but answer (the SDK's own server side). `python mcp_server.py` (stdio) or `--http PORT`."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bench", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Say `text` back."""
    return text


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        try:
            server.run()
        except* BrokenPipeError:
            pass  # the benchmark is gone
