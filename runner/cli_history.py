"""The history commands: `runner sql`, `stats`, `export` and `prune` (registered in cli.py).

Import `runner.cli`, not this module: it uses the group's shared options.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click

from runner import history, store
from runner.cli import db_option, json_option, reports_errors
from runner.database import ensure_schema, open_engine

_CELL = 60  # a table cell is cut to this; --csv and --json give values whole


class Moment(click.ParamType):  # type: ignore[type-arg]
    """A date, a UTC time, or an age such as 7d (see history.parse_moment)."""

    name = "DATE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return history.parse_moment(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


MOMENT = Moment()


def _engine(url: str | None) -> Any:
    engine = open_engine(url)
    try:
        ensure_schema(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine


# -- runner sql -----------------------------------------------------------------------------


@click.command()
@click.argument("query", metavar="SQL")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row.")
@json_option
@db_option
@reports_errors
def sql(query: str, as_csv: bool, as_json: bool, url: str | None) -> None:
    """Run one SQL statement read-only and print its rows.

    The database refuses any write: SQLite is opened read-only, PostgreSQL runs the
    statement in a READ ONLY transaction. The tables and the views `run_summary` and
    `tool_calls` are documented in the README.
    """
    if as_csv and as_json:
        raise click.UsageError("choose one of --csv and --json")
    with history.read_only_query(url, query) as result:
        if as_csv:
            _print_csv(result.columns, result.rows)
        elif as_json:
            _print_json(result.columns, result.rows)
        else:
            _print_table(result.columns, result.rows)


def _print_csv(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else _text(v, exact=True) for v in row])


def _print_json(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    keys = _unique(columns)
    out = sys.stdout
    out.write("[")
    for n, row in enumerate(rows):
        item = {key: history.plain(value) for key, value in zip(keys, row, strict=True)}
        out.write(("," if n else "") + "\n" + json.dumps(item, ensure_ascii=False))
    out.write("\n]\n")


def _print_table(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    if not columns:
        click.echo("(no result rows)")
        return
    values = list(rows)
    cells = [[_cut(_text(v)) if v is not None else "" for v in row] for row in values]
    right = [
        all(isinstance(row[i], int | float) or row[i] is None for row in values) and bool(values)
        for i in range(len(columns))
    ]
    table = [columns, *cells]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for n, line in enumerate(table):
        padded = [
            cell.rjust(w) if right[i] and n else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        click.echo("  ".join(padded).rstrip())
    click.echo(f"({len(values)} row{'' if len(values) == 1 else 's'})")


def _text(value: Any, *, exact: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not exact:
        return format(value, ".15g")  # as psql shows a double: no 0.30000000000000004
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def _cut(text: str) -> str:
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= _CELL else text[: _CELL - 3] + "..."


def _unique(columns: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    keys = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return keys


# -- runner stats ---------------------------------------------------------------------------


@click.command()
@click.option(
    "--by",
    type=click.Choice(["release", "agent", "day"]),
    default="release",
    show_default=True,
    help="Group runs by the agent's release, the agent, or the day they were created (UTC).",
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
@reports_errors
def stats(
    by: history.By,
    since: datetime | None,
    agent_name: str | None,
    min_rise: float,
    as_json: bool,
    url: str | None,
) -> None:
    """Print the stop-reason distribution of finished runs, per release, agent or day.

    Each group is compared with the previous one (the agent's previous release, or the
    previous day): a reason other than final whose share rose by --min-rise points or more,
    more than chance explains (one-sided Fisher exact test, p < 0.05), is flagged with ^.
    A rise of max_steps or repeated_call after a release is often the first sign of a
    regression.
    """
    engine = _engine(url)
    try:
        groups = history.stop_reason_stats(
            engine, by=by, since=since, agent_name=agent_name, min_rise=min_rise
        )
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps(_stats_json(by, since, min_rise, groups)))
    else:
        click.echo(_stats_table(by, groups, min_rise))


def _stats_json(
    by: str, since: datetime | None, min_rise: float, groups: list[history.Group]
) -> dict[str, Any]:
    return {
        "by": by,
        "since": history.plain(since),
        "min_rise": min_rise,
        "groups": [
            {
                "group": g.label,
                "agent_name": g.agent_name,
                "release": g.release,
                "day": g.day,
                "runs": g.runs,
                "first_run_at": history.plain(g.first_run_at),
                "stop_reasons": [
                    {"stop_reason": s.stop_reason, "count": s.count, "percent": round(s.percent, 2)}
                    for s in g.shares
                ],
                "previous": g.previous,
                "flags": [
                    {
                        "stop_reason": r.stop_reason,
                        "percent": round(r.percent, 2),
                        "previous_percent": round(r.previous_percent, 2),
                        "rise_points": round(r.points, 2),
                        "p_value": float(f"{r.p_value:.3g}"),
                    }
                    for r in g.rises
                ],
            }
            for g in groups
        ],
    }


def _stats_table(by: str, groups: list[history.Group], min_rise: float) -> str:
    if not groups:
        return "no finished runs"
    total: dict[str, int] = {}
    for g in groups:
        for s in g.shares:
            total[s.stop_reason] = total.get(s.stop_reason, 0) + s.count
    reasons = sorted(total, key=lambda r: (r != "final", -total[r], r))
    header = [by.upper(), "RUNS", *reasons]
    counts = {
        reason: max(len(str(s.count)) for g in groups for s in g.shares if s.stop_reason == reason)
        for reason in reasons
    }
    table = [header]
    for g in groups:
        shares = {s.stop_reason: s for s in g.shares}
        flagged = {r.stop_reason for r in g.rises}
        row = [g.label, str(g.runs)]
        for reason in reasons:
            share = shares.get(reason)
            width = counts[reason]
            cell = f"{share.count:>{width}} {share.percent:5.1f}%" if share else "-".rjust(width)
            row.append(cell + (" ^" if reason in flagged else ""))
        table.append(row)
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.rjust(w) if i == 1 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in table
    ]
    rises = [(g, r) for g in groups for r in g.rises]
    if rises:
        lines.append("")
        lines.append(
            f"^ share rose by {min_rise:g} points or more since the previous {by}, "
            "beyond chance (p < 0.05):"
        )
        for g, r in rises:
            lines.append(
                f"  {g.label}: {r.stop_reason} {r.previous_percent:.1f}% -> {r.percent:.1f}% "
                f"(+{r.points:.1f} points since {g.previous})"
            )
    return "\n".join(lines)


# -- runner export --------------------------------------------------------------------------


@click.command()
@click.option("--since", type=MOMENT, default=None, help="Only runs created since then.")
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="ID",
    help="Only this run (a unique id prefix works); repeat for more.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    show_default=True,
    help="Write to this file instead of standard output.",
)
@db_option
@reports_errors
def export(since: datetime | None, run_ids: tuple[str, ...], output: str, url: str | None) -> None:
    """Write runs with their journals as JSON Lines, one run per line, oldest first.

    Each line is a run's row (every column of `runs`) plus "entries": its journal rows in
    order (every column of `entries`; content and output decoded when stored as JSON).
    Streams: memory stays flat however large the history.
    """
    engine = _engine(url)
    try:
        ids = [store.find_run(engine, prefix).id for prefix in run_ids]
        with click.open_file(output, "w", encoding="utf-8") as out:
            done = history.export_runs(engine, out.write, since=since, run_ids=ids)
    finally:
        engine.dispose()
    click.echo(f"exported {done.runs} runs, {done.entries} entries", err=True)


# -- runner prune ---------------------------------------------------------------------------


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
@json_option
@db_option
@reports_errors
def prune(
    finished_before: datetime, dry_run: bool, batch_size: int, as_json: bool, url: str | None
) -> None:
    """Delete finished runs, with their journals, that finished before a date.

    Retention is your choice, so nothing is pruned unless you ask. Queued and running runs
    are never touched. Export first (`runner export`) to keep a copy.
    """
    engine = _engine(url)
    try:
        pruned = history.prune_runs(engine, finished_before, dry_run=dry_run, batch_size=batch_size)
    finally:
        engine.dispose()
    if as_json:
        data = {
            "dry_run": dry_run,
            "finished_before": history.plain(finished_before),
            "runs": pruned.runs,
            "entries": pruned.entries,
            "stop_reasons": dict(pruned.reasons.most_common()),
        }
        click.echo(json.dumps(data))
        return
    verb = "would remove" if dry_run else "removed"
    when = finished_before.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    detail = ", ".join(f"{reason} {n}" for reason, n in pruned.reasons.most_common())
    click.echo(
        f"{verb} {pruned.runs} runs finished before {when}"
        + (f" ({detail})" if detail else "")
        + f" and {pruned.entries} journal entries"
    )
