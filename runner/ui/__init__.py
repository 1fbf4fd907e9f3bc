"""The page (`runner ui`): server-rendered HTML over the run history, and the HTTP API.

Starlette serves Jinja2 templates (autoescaped) through uvicorn; every page reads through
`runner.history` on a read-only engine, and its writes (cancel, answers) go through the same
`Runner` calls as the CLI's. The one script, `static/follow.js`, follows a live run's page
through the API. The API (`/api/`, JSON and Server-Sent Events) goes through the `Runner`
alone. Needs the `ui` extra. Layout: `app` (routes, errors, serving), `pages` (what each
page reads), `security` (token, Host check, CSRF, headers), `loopback` (which hosts need no
token), `charts` (SVG geometry), `filters` (how values are written), `state` (what the
server holds: the read-only engine, the templates, the writer, the guard), `api` (the API's
routes), `api_input` (what it accepts and how it refuses), `api_events` (a run's events as
SSE), `api_openapi` (its OpenAPI document), `templates/`, `static/`.

It may import: `runner.core`, `runner.models`, `runner.history`, `runner.service` and the
shared leaves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from runner.errors import MissingExtra
from runner.service.loopback import is_loopback

if TYPE_CHECKING:
    from starlette.applications import Starlette

# The modules the `ui` extra installs (python_multipart: Starlette reads forms with it).
_EXTRA = ("starlette", "jinja2", "uvicorn", "python_multipart", "sse_starlette")


def require_extra() -> None:
    """Raise MissingExtra, naming the extra to install, unless the page's libraries are here."""
    for name in _EXTRA:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            raise MissingExtra(
                f"runner ui needs {name}: pip install 'durable-runner[ui]'"
            ) from None


def make_app(url: str | None = None, *, token: str | None = None) -> Starlette:
    """The page as an ASGI application (see runner.ui.app.make_app)."""
    require_extra()
    from runner.ui.app import make_app as make

    return make(url, token=token)


def serve(url: str | None = None, **options: Any) -> None:
    """Serve the page until interrupted (see runner.ui.app.serve)."""
    require_extra()
    from runner.ui.app import serve as run

    run(url, **options)


__all__ = ["is_loopback", "make_app", "require_extra", "serve"]
