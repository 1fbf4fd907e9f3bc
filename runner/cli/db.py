"""`runner db`: the database schema."""

from __future__ import annotations

import click

from runner.cli import output
from runner.cli.options import db_option


@click.group()
def db() -> None:
    """Manage the database schema."""


@db.command(name="upgrade")
@db_option
def db_upgrade(url: str | None) -> None:
    """Apply runner's migrations up to the latest revision."""
    from runner.service.database import (
        upgrade_database,  # loads SQLAlchemy: not for `runner --help`
    )

    output.line(f"{upgrade_database(url)} is at the latest schema revision")
