"""The history commands: `runner sql`, `stats`, `export` and `prune`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

import click

from runner.cli import output, report_output
from runner.cli.options import MOMENT, RUN_ID, db_option, json_option, read_db_option
from runner.defaults import DEFAULT_QUERY_TIMEOUT

if TYPE_CHECKING:
    from runner.history import By

# The history loads SQLAlchemy, which `runner --help` does without: each command imports it.


@click.command()
@click.argument("query", metavar="SQL")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=DEFAULT_QUERY_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Stop the query after this long; 0: no limit.",
)
@json_option
@db_option
@read_db_option
def sql(
    query: str, as_csv: bool, timeout: float, as_json: bool, url: str | None, read_url: str | None
) -> None:
    """Run one SQL statement read-only and print its rows.

    The database refuses anything but reading runner's tables and views: SQLite opens
    the file read-only with an authorizer that allows reads only; PostgreSQL runs the
    statement in a READ ONLY transaction as the role runner_reader, whoever connects.
    With --read-db, the statement runs on that replica instead. CSV and JSON are printed as
    the rows arrive. Every table and view, column by column, is
    in the manual's schema reference (docs/reference/schema.md).
    """
    from runner.history import read_only_query, resolve_read_url

    if as_csv and as_json:
        raise click.UsageError("choose one of --csv and --json")
    with read_only_query(resolve_read_url(read_url) or url, query, timeout=timeout) as result:
        if as_csv:
            report_output.query_csv(result.columns, result.rows)
        elif as_json:
            report_output.query_json(result.columns, result.rows)
        else:
            output.line(report_output.query_table(result.columns, result.rows))


@click.command()
@click.option(
    "--by",
    type=click.Choice(["release", "agent", "day", "schedule", "root"]),
    default="release",
    show_default=True,
    help="Group runs by the agent's release, the agent, the day they were created (UTC), the "
    "schedule that started them, or the agent of their tree's root (a sub-agent's runs count "
    "for the agent that started it).",
)
@click.option(
    "--since",
    type=MOMENT,
    default=None,
    help="Only runs created since then: 2026-11-01, 2026-11-01T12:00 (UTC), or an age: 7d, 12h.",
)
@click.option("--agent", "agent_name", default=None, help="Only runs of this agent (its name).")
@click.option(
    "--min-rise",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Flag a stop reason whose share rose by at least this many percentage points.",
)
@json_option
@db_option
@read_db_option
def stats(
    by: By,
    since: datetime | None,
    agent_name: str | None,
    min_rise: float,
    as_json: bool,
    url: str | None,
    read_url: str | None,
) -> None:
    """Print the stop-reason distribution of finished runs, per release, agent, day,
    schedule or root agent.

    Each group is compared with the previous one (the agent's previous release, or the
    previous day): a reason other than final whose share rose by --min-rise points or more,
    more than chance explains (one-sided Fisher exact test, p < 0.05), is flagged with ^.
    A rise of max_steps or repeated_call after a release is often the first sign of a
    regression. By release, each score of the runs (`runner score`, an agent's scorers) is
    shown with its mean and 95% interval (Student's t), and a mean that fell since the
    agent's previous release beyond chance (one-sided Welch's t-test, p < 0.05) is flagged
    with v.
    With --read-db, read from that replica, saying how far behind it is.
    """
    from runner.history import History, lag_words

    with History(url, read_url=read_url) as history:
        groups = history.stats(by=by, since=since, agent_name=agent_name, min_rise=min_rise)
        lag = history.replica_lag()
    if as_json:
        shown = report_output.stats_json(by, since, min_rise, groups)
        if lag is not None:
            shown["replica_lag_seconds"] = round(lag, 3)
        output.print_json(shown)
    else:
        output.line(report_output.stats_table(by, groups, min_rise))
        if lag is not None:
            output.line(lag_words(lag))


@click.command()
@click.option("--since", type=MOMENT, default=None, help="Only runs created since then.")
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    type=RUN_ID,
    help="Only this run (a unique id prefix works); repeat for more.",
)
@click.option("--queue", default=None, metavar="NAME", help="Only runs of this queue.")
@click.option(
    "--finished-before",
    type=MOMENT,
    default=None,
    help="Only runs that finished before then (what `prune` and a queue's --keep delete).",
)
@click.option(
    "-o",
    "--output",
    "path",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    show_default=True,
    help="Write to this file instead of standard output.",
)
@db_option
@read_db_option
def export(
    since: datetime | None,
    run_ids: tuple[str, ...],
    queue: str | None,
    finished_before: datetime | None,
    path: str,
    url: str | None,
    read_url: str | None,
) -> None:
    """Write runs with their journals as JSON Lines, one run per line, oldest first.

    Each line is a run's row (every column of `runs`) plus "entries": its journal rows in
    order (every column of `entries`; content and output decoded when stored as JSON), and
    "blobs": the offloaded payloads its rows name, by sha256, in base64 (a value passed
    through codecs is kept as its envelope: docs/guides/payloads.md).
    Streams: memory stays flat however large the history. --queue and --finished-before
    select what retention or `prune` would delete, to archive it first. With --read-db,
    read from that replica (its lag is said with the count).
    """
    from runner.history import History, lag_words

    with History(url, read_url=read_url) as history, _opened_on_first_write(path) as write:
        lag = history.replica_lag()
        done = history.export(
            write, since=since, run_ids=run_ids, queue=queue, finished_before=finished_before
        )
    output.line(
        f"exported {output.plural(done.runs, 'run')}, "
        + ("1 entry" if done.entries == 1 else f"{done.entries} entries")
        + (f" ({lag_words(lag)})" if lag is not None else ""),
        err=True,
    )


@contextmanager
def _opened_on_first_write(path: str) -> Iterator[Callable[[str], object]]:
    """A write function for `path` ("-": stdout). A file is written whole or not at all: the
    export goes to a temporary file beside it, renamed over `path` only once complete, so an
    export refused before it writes (an unknown run id) or stopped half way (a run it cannot
    write) leaves the file as it was; an export of no runs still leaves an empty file."""
    if path == "-":
        with click.open_file("-", "w", encoding="utf-8") as stdout:
            yield stdout.write
        return
    target = os.path.abspath(path)
    folder, name = os.path.split(target)
    import tempfile  # here: `runner --help` and `list` need none of it

    handle, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # as a file opened for writing would be
        with open(handle, "w", encoding="utf-8") as file:
            yield file.write
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@click.command()
@click.option(
    "--finished-before",
    type=MOMENT,
    required=True,
    help="Delete the runs that finished before then: 2026-01-01, or an age such as 90d.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Runs deleted per transaction.",
)
@click.option(
    "--blob-grace",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds a blob no row names is kept after it was written (its row may be on its way).",
)
@json_option
@db_option
def prune(
    finished_before: datetime,
    dry_run: bool,
    batch_size: int,
    blob_grace: float,
    as_json: bool,
    url: str | None,
) -> None:
    """Delete finished runs, with their journals, that finished before a date.

    Retention is your choice, so nothing is pruned unless you ask. Queued, running and
    waiting runs are never touched, nor a finished one whose tree still has a run that is
    not finished (a sub-agent's child while its parent runs), as retention's rules keep
    them. Export first (`runner export`) to keep a copy. Offloaded payloads no row names
    any more (docs/guides/payloads.md) are deleted after the runs.
    """
    from runner.history import History

    with History(url) as history:
        pruned = history.prune(
            finished_before, dry_run=dry_run, batch_size=batch_size, blob_grace=blob_grace
        )
    if as_json:
        output.print_json(report_output.pruned_json(pruned, finished_before, dry_run))
    else:
        output.line(report_output.pruned_line(pruned, finished_before, dry_run))
