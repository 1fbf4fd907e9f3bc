"""`runner queue set` and `runner queue list`: the limits of queues, and what each holds."""

from __future__ import annotations

from typing import Any

import click

from runner.cli import output, report_output
from runner.cli.options import db_option, json_option


class Limit(click.ParamType):  # type: ignore[type-arg]
    """A queue's limit: a whole number, 0 or more, or `none` for no limit."""

    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip().lower()
        if text == "none":
            return NO_LIMIT
        try:
            limit = int(text)
        except ValueError:
            self.fail(f"{value!r} is not a whole number nor 'none'", param, ctx)
        if limit < 0:
            self.fail(f"a limit must be 0 or more, not {limit}", param, ctx)
        return limit


NO_LIMIT = "none"


@click.group()
def queue() -> None:
    """Limits of queues: how many runs of a queue run at once, across all workers.

    A run goes to a queue with `runner submit --queue NAME`; `runner worker --queue a,b`
    serves only those queues. A queue without a limit (the default) runs as many as the
    workers take.
    """


@queue.command(name="set")
@click.argument("name")
@click.option(
    "--limit",
    type=Limit(),
    default=None,
    help="At most N runs of the queue at once (0 holds it; 'none': no limit).",
)
@click.option("--no-limit", is_flag=True, help="Remove the queue's limit.")
@db_option
def set_(name: str, limit: Any, no_limit: bool, url: str | None) -> None:
    """Set the limit of queue NAME; runs already running go on under a lower one."""
    if no_limit == (limit is not None):
        raise click.UsageError("give --limit N or --no-limit (one of them)")
    chosen = None if no_limit or limit == NO_LIMIT else limit
    from runner.service.runner import Runner

    with Runner(url) as runner:
        runner.set_queue_limit(name, chosen)
    if chosen is None:
        output.line(f"queue {name}: no limit")
    else:
        output.line(f"queue {name}: at most {output.plural(chosen, 'run')} at once")


@queue.command(name="list")
@db_option
@json_option
def list_(url: str | None, as_json: bool) -> None:
    """Every queue with a limit or an unfinished run: its limit, and its runs queued (ready
    to start), delayed (--at/--in still to come), running (under a live lease: what the
    limit counts) and waiting (for a person's answer, holding no slot)."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        found = runner.queues()
    if as_json:
        output.print_json([report_output.queue_json(info) for info in found])
    else:
        output.line(report_output.queues_table(found))
