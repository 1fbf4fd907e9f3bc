"""The commands that answer a waiting run: `runner approve`, `deny`, `reply`.

Each is one call of the library (`Runner.approve`, `deny`, `reply`): exactly one answer to
a wait is ever recorded, so a command that lost a race to another answer, or to a cancel,
says so in one line and exits 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from runner.cli import output, run_output
from runner.cli.options import db_option, json_option
from runner.service.documents import answered_json

if TYPE_CHECKING:
    from runner.core.waiting import Answered
    from runner.service.runner import Runner


def _runner(url: str | None) -> Runner:
    # Imported here: the durable runner loads SQLAlchemy, which `runner --help` does without.
    from runner.service.runner import Runner

    return Runner(url)


def _call_option(fn: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--call",
        metavar="KEY",
        default=None,
        help="The call to answer (its idempotency key, as shown): needed when the run waits "
        "for several calls of one step; otherwise it makes sure you answer the call you saw.",
    )(fn)


def _by_option(fn: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--by", default=None, metavar="NAME", help="Who answers (default: your OS user name)."
    )(fn)


def _not_blank(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.strip():
        raise click.BadParameter("must not be empty")
    return value


def _print(answered: Answered, as_json: bool) -> None:
    if as_json:
        output.print_json(answered_json(answered))
    else:
        output.line(run_output.answered_line(answered))


@click.command()
@click.argument("run_id", metavar="ID")
@_call_option
@click.option("--note", default=None, help="A note journaled with the approval (for people).")
@_by_option
@db_option
@json_option
def approve(
    run_id: str, call: str | None, note: str | None, by: str | None, url: str | None, as_json: bool
) -> None:
    """Approve the call run ID waits for: it runs, with its idempotency key, when the run goes
    on (a worker takes it, or `runner resume ID`)."""
    with _runner(url) as runner:
        answered = runner.approve(run_id, call=call, note=note, by=by)
    _print(answered, as_json)


@click.command()
@click.argument("run_id", metavar="ID")
@click.option(
    "--reason",
    required=True,
    callback=_not_blank,
    help="Why: the model is shown `Denied: REASON` instead of the call's result.",
)
@_call_option
@_by_option
@db_option
@json_option
def deny(
    run_id: str, reason: str, call: str | None, by: str | None, url: str | None, as_json: bool
) -> None:
    """Deny the call run ID waits for (or decline its question): the call never runs, the
    model reads the reason and decides what to do."""
    with _runner(url) as runner:
        answered = runner.deny(run_id, reason=reason, call=call, by=by)
    _print(answered, as_json)


@click.command()
@click.argument("run_id", metavar="ID")
@click.argument("text", callback=_not_blank)
@_call_option
@_by_option
@db_option
@json_option
def reply(
    run_id: str, text: str, call: str | None, by: str | None, url: str | None, as_json: bool
) -> None:
    """Reply TEXT to the question run ID asked (ask_human): the model reads it as the answer."""
    with _runner(url) as runner:
        answered = runner.reply(run_id, text, call=call, by=by)
    _print(answered, as_json)
