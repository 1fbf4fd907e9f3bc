"""The page's ASGI application (Starlette) and how `runner ui` serves it (uvicorn)."""

from __future__ import annotations

import contextlib
import logging
import re
import socket
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from runner.errors import AmbiguousRunId, DatabaseUnavailable, RunnerError, RunNotFound
from runner.history import resolve_read_url
from runner.service.database import open_read_only, resolve_url
from runner.service.loopback import is_loopback
from runner.ui import api, pages
from runner.ui.security import Guard, is_api
from runner.ui.state import UiState

log = logging.getLogger("runner.ui")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8780


def make_app(
    url: str | None = None, *, token: str | None = None, read_url: str | None = None
) -> Starlette:
    """The page as an ASGI app reading the database at `url` through a read-only engine.

    With `token`, every request must carry it (see runner.ui.security); without, the app
    answers only to requests addressed to a loopback name. With `read_url` (or
    RUNNER_READ_DATABASE_URL), a streaming replica of it: the pages and the API's reads
    of runs go there, and say how far behind it is; writes and event streams go to `url`.
    """
    resolved = resolve_url(url)
    replica = resolve_read_url(read_url)
    reader = open_read_only(replica or resolved)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            state.close()

    app = Starlette(
        routes=[
            Route("/", pages.runs, name="runs"),
            Route("/runs/{run_id}", pages.run, name="run"),
            Route("/runs/{run_id}/cancel", pages.cancel, methods=["POST"], name="cancel"),
            Route("/runs/{run_id}/approve", pages.approve, methods=["POST"], name="approve"),
            Route("/runs/{run_id}/deny", pages.deny, methods=["POST"], name="deny"),
            Route("/runs/{run_id}/reply", pages.reply, methods=["POST"], name="reply"),
            Route("/stats", pages.stats, name="stats"),
            Route("/limits", pages.limits, name="limits"),
            Mount("/api", routes=api.routes),
            Mount("/static", StaticFiles(packages=[("runner.ui", "static")]), name="static"),
        ],
        exception_handlers={
            HTTPException: _http_error,
            RunnerError: _runner_error,
            Exception: _server_error,
        },
        middleware=[Middleware(Guard, token=token)],
        lifespan=lifespan,
    )
    state = UiState(resolved, reader, replica)
    app.state.ui = state
    return app


def serve(
    url: str | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    read_url: str | None = None,
) -> None:
    """Serve the page until interrupted (Ctrl-C). A host other than loopback needs a token."""
    import uvicorn

    if not token and not is_loopback(host):
        raise ValueError(f"serving {host} needs a token (--token or RUNNER_UI_TOKEN)")
    app = make_app(url, token=token, read_url=read_url)
    shown = f"[{host}]" if ":" in host else host
    # Bound here, before "serving on" is said: a port in use is one line and exit 1, not a
    # line saying it serves and then uvicorn's own exit 3.
    listening = _listen(host, port, f"http://{shown}:{port}/")
    log.info(f"serving {app.state.ui.shown_url} on http://{shown}:{port}/")
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, HidesTokens) for f in access.filters):
        access.addFilter(HidesTokens())
    # log_config=None: uvicorn's records go to the handlers the CLI configured.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, server_header=False)
    uvicorn.Server(config).run(sockets=[listening])


def _listen(host: str, port: int, shown: str) -> socket.socket:
    """A socket bound to (host, port), as uvicorn binds one; RunnerError if it cannot be."""
    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    bound = socket.socket(family, socket.SOCK_STREAM)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        bound.bind((address, port))
    except OSError as exc:
        bound.close()
        why = exc.strerror or str(exc)
        raise RunnerError(f"cannot serve on {shown}: {why} (--port chooses another)") from None
    return bound


class HidesTokens(logging.Filter):
    """Takes the `?token=` of a request's path out of its access-log line."""

    _TOKEN = re.compile(r"([?&]token=)[^&\s]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                self._TOKEN.sub(r"\1***", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        return True


def _error_page(request: Request, status: int, message: str) -> Response:
    if is_api(request.url.path):  # the API answers in JSON, whatever failed
        return api.error_response(status, message)
    state: UiState = request.app.state.ui
    return state.render(request, "error.html", status_code=status, status=status, message=message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail if exc.status_code != 404 else "no such page"

    return _error_page(request, exc.status_code, str(message))


async def _runner_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, RunNotFound | AmbiguousRunId):
        status = 404
    elif isinstance(exc, DatabaseUnavailable):
        status = 503
    else:
        status = 400
    return _error_page(request, status, str(exc))


async def _server_error(request: Request, exc: Exception) -> Response:
    # One line in the log; the page says no more than that something failed.
    log.error(f"{request.method} {request.url.path} failed: {type(exc).__name__}: {exc}")
    return _error_page(request, 500, "the page failed; the server's log says why")
