"""`runner send`: a message into a run, exactly once per key.

One call of the library (`Runner.send`). The key (given with --key, else a new one) is
printed: a send that was interrupted is retried with the same key, and the message is
still delivered once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from runner.cli import output
from runner.cli.options import RUN_ID, budget_options, db_option, given, json_option
from runner.service import documents

if TYPE_CHECKING:
    from runner.core.messages import Sent


@click.command()
@click.argument("run_id", metavar="ID", type=RUN_ID)
@click.argument("message")
@click.option(
    "--key",
    default=None,
    metavar="KEY",
    help="The message's idempotency key (default: a new one, printed): the same key sent "
    "again is the same message, delivered once.",
)
@click.option(
    "--revive",
    is_flag=True,
    help="If the run has finished, continue it with the message (with the budget flags "
    "below, as `runner resume` takes them); without it, a finished run refuses a message.",
)
@budget_options
@db_option
@json_option
def send(
    run_id: str,
    message: str,
    key: str | None,
    revive: bool,
    url: str | None,
    as_json: bool,
    **budgets: Any,
) -> None:
    """Send MESSAGE to run ID: the model reads it as a user turn before its next step.

    A running, queued or waiting run takes it (a waiting run waits for its answer still,
    and reads the message after). A finished run refuses it (exit 1) unless --revive.
    """
    from runner.service.runner import Runner  # SQLAlchemy: not for `runner --help`

    chosen = given(budgets)
    if chosen and not revive:
        raise click.UsageError("budget flags go with --revive")
    with Runner(url) as runner:
        sent = runner.send(run_id, message, key=key, revive=revive, **chosen)
    if as_json:
        output.print_json(documents.sent_json(sent))
    else:
        output.line(sent_line(sent))


def sent_line(sent: Sent) -> str:
    """A sent message in words, its key included (a retry names it)."""
    key = output.printable(sent.key)
    if sent.duplicate:
        done = "delivered" if sent.delivered_seq is not None else "not read yet"
        return (
            f"message {sent.number} (key {key}) was sent to run {sent.run_id} before: "
            f"sent once, {done}"
        )
    if sent.revived:
        return (
            f"sent message {sent.number} (key {key}) to run {sent.run_id}, revived: it is "
            "queued, and reads the message before its next step"
        )
    return (
        f"sent message {sent.number} (key {key}) to run {sent.run_id} ({sent.status}): "
        "the model reads it before the run's next step"
    )
