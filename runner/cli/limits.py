"""`runner limit set`, `list` and `rm`: provider limits shared by every worker."""

from __future__ import annotations

import click

from runner.cli import output, report_output
from runner.cli.options import db_option, json_option


@click.group()
def limit() -> None:
    """Provider limits: tokens and requests per minute, shared by every worker.

    An agent's model calls draw from the limit it names (`Agent(model, tools,
    limit="NAME")`); the OpenAI and Anthropic adapters draw from `provider/model` (say
    `openai/gpt-4.1`) unless told otherwise. A limit not set limits nothing.
    """


@limit.command(name="set")
@click.argument("name")
@click.option(
    "--tokens-per-minute",
    type=click.IntRange(min=1),
    default=None,
    help="At most N tokens a minute across all workers (estimates in flight, usage after).",
)
@click.option(
    "--requests-per-minute",
    type=click.IntRange(min=1),
    default=None,
    help="At most N model calls a minute across all workers.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="At most N model calls in flight at once across all workers.",
)
@db_option
def set_(
    name: str,
    tokens_per_minute: int | None,
    requests_per_minute: int | None,
    concurrency: int | None,
    url: str | None,
) -> None:
    """Set limit NAME (replacing what it was); a measure not given is not limited."""
    if tokens_per_minute is None and requests_per_minute is None and concurrency is None:
        raise click.UsageError(
            "give --tokens-per-minute, --requests-per-minute or --concurrency (or several)"
        )
    from runner.service.runner import Runner

    with Runner(url) as runner:
        runner.set_limit(
            name,
            tokens_per_minute=tokens_per_minute,
            requests_per_minute=requests_per_minute,
            concurrency=concurrency,
        )
    said = [
        f"{amount:,} {what}"
        for amount, what in (
            (tokens_per_minute, "tokens a minute"),
            (requests_per_minute, "requests a minute"),
            (concurrency, "calls at once"),
        )
        if amount is not None
    ]
    output.line(f"limit {name}: at most {', '.join(said)}")


@limit.command(name="list")
@db_option
@json_option
def list_(url: str | None, as_json: bool) -> None:
    """Every limit: what it charged over the last minute (tokens: the usage of calls done,
    the estimate of calls in flight), what is left, calls in flight, runs waiting for room,
    and a provider's Retry-After that holds it back."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        found = runner.limits()
    if as_json:
        output.print_json([report_output.limit_json(info) for info in found])
    else:
        output.line(report_output.limits_table(found))


@limit.command(name="rm")
@click.argument("name")
@db_option
def rm(name: str, url: str | None) -> None:
    """Remove limit NAME: its model calls draw from nothing from now on."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        runner.remove_limit(name)
    output.line(f"limit {name} removed")
