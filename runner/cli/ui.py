"""`runner ui`: serve the page (the page itself is the runner.ui package)."""

from __future__ import annotations

import click

from runner.cli.options import db_option, read_db_option
from runner.defaults import UI_HOST, UI_PORT, UI_TOKEN_VARIABLE


@click.command()
@click.option(
    "--host",
    default=UI_HOST,
    show_default=True,
    help="Address to listen on. Anything but loopback needs --token.",
)
@click.option(
    "--port", type=click.IntRange(1, 65535), default=UI_PORT, show_default=True, help="Port."
)
@click.option(
    "--token",
    envvar=UI_TOKEN_VARIABLE,
    default=None,
    help=f"Require this token on every request (default: ${UI_TOKEN_VARIABLE}).",
)
@db_option
@read_db_option
def ui(host: str, port: int, token: str | None, url: str | None, read_url: str | None) -> None:
    """Serve pages of the runs, a run's transcript and the stop reasons per release, and
    the HTTP API under /api/.

    The pages read the database through a read-only connection; their writes (cancel,
    approve, deny, reply) are forms (POST, CSRF-checked) that do what the commands do. The
    API (JSON; a run's events as Server-Sent Events; OpenAPI at /api/openapi.json) goes
    through the same library; its writes need the token in an Authorization header. With
    --read-db, the pages and the API's reads of runs go to that replica, and say its lag.

    Needs the `ui` extra: pip install 'durable-runner[ui]'.
    """
    # Imported here: the page loads Starlette, Jinja2 and SQLAlchemy; `--help` loads none.
    from runner.ui import is_loopback, serve

    if not token and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is not a loopback address: give --token (or ${UI_TOKEN_VARIABLE})"
        )
    serve(url, host=host, port=port, token=token, read_url=read_url)
