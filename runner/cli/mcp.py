"""`runner mcp serve`: runs served to MCP clients (the server itself is runner.mcp.serve)."""

from __future__ import annotations

import click

from runner.cli.options import db_option
from runner.defaults import UI_TOKEN_VARIABLE


@click.group()
def mcp() -> None:
    """Serve runs to MCP clients (agents, IDEs)."""


@mcp.command()
@click.option(
    "--http",
    "address",
    default=None,
    metavar="HOST:PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio. Anything but "
    "loopback needs --token.",
)
@click.option(
    "--token",
    envvar=UI_TOKEN_VARIABLE,
    default=None,
    help=f"Over HTTP, require Authorization: Bearer TOKEN (default: ${UI_TOKEN_VARIABLE}).",
)
@db_option
def serve(address: str | None, token: str | None, url: str | None) -> None:
    """Serve runs as MCP tools: submit_run, get_run, list_runs, wait_for_run, run_events,
    approve_call, deny_call, reply_to_run, cancel_run, send_message and query_history (one
    read-only SQL statement, as `runner sql`), and each run's transcript as a resource.

    On stdio by default (for a client that starts this command); with --http, streamable
    HTTP, refusing requests from other origins. Needs the `mcp` extra: pip install
    'durable-runner[mcp]'.
    """
    host, port = _address(address) if address is not None else (None, None)
    # Imported here: the SDK loads Starlette, pydantic and more; `--help` loads none.
    try:
        import mcp as _sdk  # noqa: F401 - only to say what to install
    except ModuleNotFoundError:
        raise click.ClickException(
            "runner mcp serve needs the mcp SDK: pip install 'durable-runner[mcp]'"
        ) from None
    from runner.mcp import http
    from runner.mcp.serve import make_server
    from runner.service.loopback import is_loopback

    if host is not None and not token and not is_loopback(host):
        raise click.UsageError(
            f"--http {address}: {host} is not a loopback address: give --token "
            f"(or ${UI_TOKEN_VARIABLE})"
        )
    server, runs = make_server(url)
    try:
        if host is None or port is None:
            server.run("stdio")
        else:
            http.serve(server, host, port, token)
    finally:
        runs.close()


def _address(given: str) -> tuple[str, int]:
    host, colon, port = given.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise click.BadParameter(f"{given!r} is not HOST:PORT", param_hint="--http")
    return host, int(port)
