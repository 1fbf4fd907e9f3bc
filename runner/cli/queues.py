"""`runner queue set` and `runner queue list`: the limits of queues, and what each holds."""

from __future__ import annotations

from typing import Any

import click

from runner.cli import output, report_output
from runner.cli.options import db_option, json_option
from runner.service.delays import parse_duration


class Count(click.ParamType):  # type: ignore[type-arg]
    """A whole number, 0 or more, or `none` (no limit, or no such rule): a queue's limit,
    or how many finished runs it keeps. `what` names it in the error."""

    name = "N"

    def __init__(self, what: str) -> None:
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip().lower()
        if text == NONE:
            return NONE
        try:
            count = int(text)
        except ValueError:
            self.fail(f"{value!r} is not a whole number nor 'none'", param, ctx)
        if count < 0:
            self.fail(f"a {self.what} must be 0 or more, not {count}", param, ctx)
        return count


NONE = "none"

# runner.store.releases.OlderReleases, named here: `runner --help` loads no store.
OLDER_RELEASES = ("continue", "pin", "check")
_POLICY_WORDS = {
    "continue": "continue on any worker",
    "pin": "are left to workers of their release",
    "check": "are checked by a replay before a worker of another release runs them on",
}


class Keep(click.ParamType):  # type: ignore[type-arg]
    """How long finished runs are kept: 30s, 10m, 2h, 30d, or `none` for no such rule."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if str(value).strip().lower() == NONE:
            return NONE
        try:
            return parse_duration(str(value)).total_seconds()
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


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
    type=Count("limit"),
    default=None,
    help="At most N runs of the queue at once (0 holds it; 'none': no limit).",
)
@click.option("--no-limit", is_flag=True, help="Remove the queue's limit.")
@click.option(
    "--keep",
    type=Keep(),
    default=None,
    help="Workers delete finished runs this long after they finished: 30d, 12h ('none': "
    "no such rule).",
)
@click.option(
    "--keep-runs",
    type=Count("count"),
    default=None,
    help="Workers keep only the newest N finished runs of the queue ('none': no such rule).",
)
@click.option(
    "--older-releases",
    type=click.Choice(OLDER_RELEASES),
    default=None,
    help="What a worker does with a run of the queue from another release than its own: "
    "continue (run it on: the default), pin (leave it to a worker of its release) or check "
    "(replay its journal first; park it if it differs).",
)
@db_option
def set_(
    name: str,
    limit: Any,
    no_limit: bool,
    keep: Any,
    keep_runs: Any,
    older_releases: str | None,
    url: str | None,
) -> None:
    """Set the limit of queue NAME, its retention (NAME '*': every queue's default) or its
    policy for runs of older releases.

    A lower limit lets the runs already running go on. Retention: workers delete the
    queue's finished runs, with their journals, a small batch at a time, once a rule says
    so (a rule the queue leaves unset is the '*' default's); a run not finished, or in a
    tree with a run not finished, is never deleted. A rule not given stays as it is.
    Older releases: see `runner releases` and docs/guides/deploys.md.
    """
    if no_limit and limit is not None:
        raise click.UsageError("give --limit N or --no-limit, not both")
    limiting = no_limit or limit is not None
    keeping = keep is not None or keep_runs is not None
    if not limiting and not keeping and older_releases is None:
        raise click.UsageError(
            "give --limit N, --no-limit, --keep, --keep-runs or --older-releases"
        )
    if name == "*" and (limiting or older_releases is not None):
        raise click.UsageError(
            "'*' holds the default retention of every queue, not a limit nor a policy"
        )
    from runner.service.runner import Runner

    with Runner(url) as runner:
        if older_releases is not None:
            runner.set_older_releases(name, older_releases)
            output.line(f"queue {name}: runs of older releases {_POLICY_WORDS[older_releases]}")
        if limiting:
            chosen = None if no_limit or limit == NONE else limit
            runner.set_queue_limit(name, chosen)
            if chosen is None:
                output.line(f"queue {name}: no limit")
            else:
                output.line(f"queue {name}: at most {output.plural(chosen, 'run')} at once")
        if keeping:
            now = {info.name: info for info in runner.queues()}.get(name)
            seconds = now.keep_seconds if now is not None and keep is None else keep
            count = now.keep_runs if now is not None and keep_runs is None else keep_runs
            seconds = None if seconds == NONE else seconds
            count = None if count == NONE else count
            runner.set_retention(name, keep=seconds, keep_runs=count)
            output.line(f"queue {name}: {report_output.retention_text(seconds, count)}")


@queue.command(name="list")
@db_option
@json_option
def list_(url: str | None, as_json: bool) -> None:
    """Every queue with a limit, retention or an unfinished run: its limit, what it keeps
    (the row '*': every queue's default), and its runs queued (ready to start), delayed
    (--at/--in still to come), running (under a live lease: what the limit counts) and
    waiting (for a person's answer, holding no slot)."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        found = runner.queues()
    if as_json:
        output.print_json([report_output.queue_json(info) for info in found])
    else:
        output.line(report_output.queues_table(found))
