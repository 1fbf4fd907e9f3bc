"""MCP both ways: an MCP server's tools as durable runner tools, and runs served to MCP
clients (`runner mcp serve`).

`mcp_tools` (`tools`) gives the tools of one MCP server (a stdio command or a streamable
HTTP URL) as runner tools, each settled after a crash as its annotations say
(`settlement`), over one session per process (`connection`), their results as observations
(`results`). `serve` is a face like the CLI and the HTTP API: runs, their events and their
waits as MCP tools, through the `Runner` alone, on stdio or over streamable HTTP (`http`:
the token, Host and Origin checks). Needs the `mcp` extra
(`pip install 'durable-runner[mcp]'`), imported only when used.

It may import: `runner.core`, `runner.service`, `runner.history` and the shared leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.lazy import exports

if TYPE_CHECKING:
    from runner.mcp.connection import close_sessions as close_sessions
    from runner.mcp.results import MCPToolError as MCPToolError
    from runner.mcp.settlement import KEY_META as KEY_META
    from runner.mcp.tools import mcp_tools as mcp_tools

_HOMES = {
    "mcp_tools": "runner.mcp.tools",
    "close_sessions": "runner.mcp.connection",
    "MCPToolError": "runner.mcp.results",
    "KEY_META": "runner.mcp.settlement",
}
__getattr__ = exports(__name__, _HOMES)
__all__ = sorted(_HOMES)
