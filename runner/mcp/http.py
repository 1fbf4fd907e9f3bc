"""`runner mcp serve --http`: the MCP server over streamable HTTP, guarded as the HTTP API is.

With a token, every request must carry `Authorization: Bearer TOKEN`; without one, the
server answers only to a loopback Host (a DNS-rebinding page cannot reach it). A request
from a browser page of another origin (an `Origin` header naming another site) is refused
either way.
"""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING, Any

from runner.service.loopback import is_loopback

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

PATH = "/mcp"

Scope = dict[str, Any]
Receive = Any
Send = Any


class Guard:
    """ASGI middleware: the token, the Host check and the Origin check of every request."""

    def __init__(self, app: Any, *, token: str | None) -> None:
        self.app = app
        self.token = token or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # the lifespan: the session manager's
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, message = refused
        body = json.dumps({"error": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length",
                            str(len(body)).encode())],
            }
        )  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        host = headers.get("host", "")
        origin = headers.get("origin")
        if origin is not None and origin != f"{scope.get('scheme', 'http')}://{host}":
            return 403, "refused: a request from another origin"
        if self.token is None:
            if not is_loopback(_host_name(host)):
                return 421, "this server answers only to localhost; give --token to serve others"
            return None
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            credentials.strip().encode(), self.token.encode()
        ):
            return 401, "this server needs the header Authorization: Bearer TOKEN"
        return None


def _host_name(header: str) -> str:
    """The name in a Host header, without its port (`[::1]:8000` -> `::1`)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def app(server: MCPServer, token: str | None) -> Guard:
    """The server's streamable HTTP application (at /mcp), guarded."""
    from mcp.server.transport_security import TransportSecuritySettings

    inner = server.streamable_http_app(
        streamable_http_path=PATH,
        # The Guard checks Host and Origin, the same with or without a token.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return Guard(inner, token=token)


def serve(server: MCPServer, host: str, port: int, token: str | None) -> None:
    """Serve until interrupted."""
    import uvicorn

    uvicorn.run(app(server, token), host=host, port=port, log_level="warning")
