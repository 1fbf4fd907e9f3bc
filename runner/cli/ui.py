"""`runner ui`: serve the page (the page itself is the runner.ui package)."""

from __future__ import annotations

import click

from runner.cli.options import db_option
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
def ui(host: str, port: int, token: str | None, url: str | None) -> None:
    """Serve pages of the runs, a run's transcript and the stop reasons per release.

    The pages read the database through a read-only connection; the only write, cancel,
    is a form (POST, CSRF-checked) that does what `runner cancel` does. Needs the `ui`
    extra: pip install 'durable-runner[ui]'.
    """
    # Imported here: the page loads Starlette, Jinja2 and SQLAlchemy; `--help` loads none.
    from runner.ui import is_loopback, serve

    if not token and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is not a loopback address: give --token (or ${UI_TOKEN_VARIABLE})"
        )
    serve(url, host=host, port=port, token=token)
