"""Who may see the page and what a response may do in the browser.

- On a loopback address with no token, only requests naming a loopback host are served:
  a web page elsewhere cannot reach the server through DNS rebinding.
- With a token, every request must carry it: `Authorization: Bearer TOKEN`, or the cookie
  that opening any page with `?token=TOKEN` once sets (then the URL is cleaned of it).
- Every write of the page is a POST whose form carries a CSRF token bound to the browser's
  session cookie (an HMAC under a secret of this server process); a POST from another origin
  is refused before its form is read.
- A write of the API (a POST under `/api/`) needs the token in its `Authorization` header:
  the cookie alone is not enough, so no other site can make a browser write with it. On a
  server with no token (loopback only) it needs `Content-Type: application/json`, which no
  other site can send without a preflight this server never grants. The API's refusals
  are JSON.
- Every response forbids scripts other than the page's own files (`static/follow.js`, which
  follows a live run through the API), inline scripts, connections to other origins, frames,
  plug-ins and foreign form targets (the CSP), so even a mistake in escaping could not run
  what a model wrote.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import URL, MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_COOKIE = "runner_ui_token"
SESSION_COOKIE = "runner_ui_session"
TOKEN_VARIABLE = "RUNNER_UI_TOKEN"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})

HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
        "img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # Not no-referrer: with it, a browser sends `Origin: null` on the page's own forms.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def is_api(path: str) -> bool:
    """Whether `path` is the API's (JSON) rather than the page's."""
    return path == "/api" or path.startswith("/api/")


def _refused(connection: HTTPConnection, message: str, status: int) -> Response:
    if is_api(connection.url.path):
        return JSONResponse({"error": message}, status_code=status)
    return PlainTextResponse(message, status_code=status)


def _host_name(header: str) -> str:
    """The host part of a Host header: `127.0.0.1:8780`, `[::1]:8780`, `localhost`."""
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Csrf:
    """CSRF tokens: an HMAC of the browser's session cookie under this process's secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret or secrets.token_bytes(32)

    def token(self, session: str) -> str:
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    def valid(self, session: str | None, given: object) -> bool:
        if not session or not isinstance(given, str):
            return False
        return hmac.compare_digest(self.token(session), given)


class Guard:
    """ASGI middleware: the token, the Host check and the response headers of every page."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.token = token or None
        # What the token cookie holds: derived from the token, so it is not the token itself
        # and a restarted server with the same token still accepts it.
        self.cookie_value = (
            hmac.new(self.token.encode(), b"runner ui cookie", hashlib.sha256).hexdigest()
            if self.token
            else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        refusal = self._refusal(connection)
        if refusal is not None:
            await _with_headers(refusal)(scope, receive, send)
            return
        session = connection.cookies.get(SESSION_COOKIE)
        fresh = None
        if not session:
            session = fresh = secrets.token_urlsafe(24)
        scope.setdefault("state", {})["session"] = session

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
                if fresh is not None:
                    headers.append("set-cookie", _cookie(SESSION_COOKIE, fresh))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, connection: HTTPConnection) -> Response | None:
        if self.token is None:
            host = _host_name(connection.headers.get("host", "")).lower()
            if host not in LOOPBACK_NAMES:
                return _refused(
                    connection,
                    "this page answers only to localhost; run `runner ui --token` to serve "
                    "other names",
                    421,
                )
        else:
            given = connection.query_params.get("token")
            if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
                # The token leaves the URL (history, logs, Referer) for a cookie.
                kept = [(k, v) for k, v in connection.query_params.multi_items() if k != "token"]
                # One leading slash: `//evil.com/` (or `/\evil.com/`) is another site to a browser.
                url = URL(path="/" + connection.url.path.lstrip("/\\"), query=urlencode(kept))
                response = RedirectResponse(str(url), status_code=303)
                response.headers.append("set-cookie", _cookie(TOKEN_COOKIE, self.cookie_value))
                return response
            if not self._authorized(connection):
                return _refused(
                    connection,
                    "this page needs its token: open it once with ?token=TOKEN, or send "
                    "Authorization: Bearer TOKEN",
                    401,
                )
        if connection.scope["method"] == "POST":
            origin = connection.headers.get("origin")
            own = f"{connection.url.scheme}://{connection.headers.get('host', '')}"
            if origin is not None and origin != own:
                return _refused(connection, "refused: a form from another site", 403)
            if is_api(connection.url.path):
                return self._api_write_refusal(connection)
        return None

    def _api_write_refusal(self, connection: HTTPConnection) -> Response | None:
        if self.token is not None:
            if not self._bearer(connection):
                return _refused(
                    connection, "a write needs the header Authorization: Bearer TOKEN", 401
                )
            return None
        kind = connection.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return _refused(
                connection, "a write needs Content-Type: application/json (or a token)", 415
            )
        return None

    def _bearer(self, connection: HTTPConnection) -> bool:
        assert self.token is not None
        header = connection.headers.get("authorization", "")
        scheme, _, credentials = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), self.token.encode()
        )

    def _authorized(self, connection: HTTPConnection) -> bool:
        assert self.token is not None and self.cookie_value is not None
        if self._bearer(connection):
            return True
        cookie = connection.cookies.get(TOKEN_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self.cookie_value.encode())


def _cookie(name: str, value: str | None) -> str:
    return f"{name}={value}; Path=/; HttpOnly; SameSite=Strict"


def _with_headers(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers[name] = value
    return response
