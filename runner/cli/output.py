"""The one way out for every command: lines, tables, CSV, JSON and colour.

Tables are laid out by rich: columns two spaces apart, never wrapped to the terminal's
width, header in bold on a terminal only. Colour honours NO_COLOR and is off when stdout is
not a terminal (a pipe, a file, click's CliRunner): there the text has no escape codes.
rich is imported only by the commands that print a table: `runner --help` never loads it.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import click

from runner.journal import Entry, EntryKind
from runner.result import AgentResult

if TYPE_CHECKING:
    from rich.console import Console

    from runner.history import Group, Pruned
    from runner.store import RunRow

_WIDTH = 100  # `show` cuts an observation to this; --json has it whole
_CELL = 60  # a `runner sql` cell is cut to this; --csv and --json give values whole
# Wide enough that no table is ever wrapped or cut: lines are as long as their cells.
_UNBOUNDED = 1_000_000


# -- lines and JSON -------------------------------------------------------------------------


def line(text: str, *, err: bool = False) -> None:
    """One line (or several) on stdout, or on stderr with `err`."""
    click.echo(text, err=err)


def print_json(data: Any) -> None:
    line(json.dumps(data, default=str))


def text(value: Any, *, exact: bool = False) -> str:
    """A value as a person reads it: text as is, other JSON values as JSON, bytes in hex,
    and a float to 15 digits (as psql shows a double) unless `exact`."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not exact:
        return format(value, ".15g")  # no 0.30000000000000004
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def cut(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with `...`."""
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


# -- tables ---------------------------------------------------------------------------------


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    right: Collection[int] = (),
    right_headers: Collection[int] = (),
) -> str:
    """Columns two spaces apart, left-aligned except the cells of the columns in `right`
    (and the headers in `right_headers`); no trailing spaces."""
    from rich.table import Table
    from rich.text import Text

    grid = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="")
    for i, name in enumerate(header):
        title = Text(name, justify="right" if i in right_headers else "left")
        title.stylize("bold")  # the name only, not the spaces around it
        grid.add_column(
            title,
            justify="right" if i in right else "left",
            no_wrap=True,
        )
    for row in rows:
        # A cell is one line: rich would widen a tab past the width it measured.
        grid.add_row(*(Text(cell.replace("\t", " ")) for cell in row))
    console = _console()
    with console.capture() as captured:
        console.print(grid)
    return "\n".join(printed.rstrip() for printed in captured.get().splitlines())


def _console() -> Console:
    from rich.console import Console

    # Asked of stdout itself (rich honours NO_COLOR, FORCE_COLOR and TERM=dumb); click.echo
    # strips any style again from what is not a terminal.
    terminal = Console(file=sys.stdout).is_terminal
    return Console(
        width=_UNBOUNDED,
        height=25,  # unused, but without it rich gives a dumb terminal 80 columns
        force_terminal=terminal,
        color_system="auto" if terminal else None,
        highlight=False,
        markup=False,
        emoji=False,
    )


# -- runs (`show`, `list`, `run --json`) ------------------------------------------------------

# The fields an AgentResult and a RunRow share, under the same names.
_OUTCOME = ("status", "stop_reason", "output", "steps", "tokens", "cost", "error", "wrapped_up")


def run_json(
    result: AgentResult | None, row: RunRow | None = None, *, transcript: bool = False
) -> dict[str, Any]:
    """The machine-readable form of a run."""
    data: dict[str, Any] = {}
    # How the run ended (or stands): from the result when there is one, else from the row.
    source = result if result is not None else row
    if source is not None:
        data["id"] = result.run_id if result is not None else row.id if row else None
        data.update({name: getattr(source, name) for name in _OUTCOME})
    if row is not None:
        data.update(
            agent=row.agent,
            agent_name=row.agent_name,
            release=row.release,
            task=row.task,
            budgets=row.budgets,
            resumes=row.resumes,
            cancel_requested=row.cancel_requested,
            worker=row.lease_owner,
            worker_since=_iso(row.leased_at) if row.lease_owner else None,
            lease_expires_at=_iso(row.lease_expires_at),
            created_at=_iso(row.created_at),
            finished_at=_iso(row.finished_at),
        )
    if transcript and result is not None:
        data["transcript"] = result.transcript
    return data


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def render_run(result: AgentResult, row: RunRow) -> str:
    """A readable transcript with the run's header."""
    lines = [
        f"run       {row.id}",
        f"agent     {row.agent or '-'}"
        + (f"  ({row.agent_name}, release {row.release})" if row.agent_name else ""),
        f"status    {row.status}" + (f": {row.stop_reason}" if row.stop_reason else ""),
        f"counters  {result.steps} steps, {result.tokens} tokens, cost {result.cost:g}, "
        f"{row.resumes} resumes",
        f"created   {_when(row.created_at)} UTC"
        + (f", finished {_when(row.finished_at)} UTC" if row.finished_at else ""),
    ]
    if row.lease_owner:
        lines.append(f"worker    {row.lease_owner} since {_when(row.leased_at)} UTC")
    if row.error:
        lines.append(f"error     {row.error}")
    lines.append("")
    for message in result.transcript:
        lines.extend(_message_lines(message))
    lines.extend(_ending(result, row))
    return "\n".join(lines)


# What each stop means, and the budget whose limit it names (shown with the limit's value).
_STOPS = {
    "final": ("answered", None),
    "max_steps": ("gave up: the step cap was reached", "max_steps"),
    "token_budget": ("gave up: the tokens spent went over the budget", "max_tokens"),
    "cost_budget": ("gave up: the cost spent went over the budget", "max_cost"),
    "time_budget": ("gave up: the wall-clock budget ran out", "max_seconds"),
    "repeated_call": ("looped: the same tool call, same arguments, too many times", "max_repeats"),
    "tool_errors": ("too many failed steps in a row", "max_consecutive_errors"),
    "cancelled": ("cancelled on request", None),
    "model_error": ("the model kept failing after its retries", None),
    "crash_loop": ("given up: the run kept killing its worker", None),
}


def _ending(result: AgentResult, row: RunRow) -> list[str]:
    """How the transcript ends: the stop and what it means, or the call still in flight."""
    if row.stop_reason is None:
        return [
            f"  .. {name}: no result yet (running, or a resume will settle it)"
            for name in _unanswered(result.transcript)
        ]
    meaning, budget = _STOPS.get(str(row.stop_reason), (str(row.stop_reason), None))
    if budget is not None and row.budgets.get(budget) is not None:
        meaning += f" ({budget}={row.budgets[budget]})"
    if row.wrapped_up:
        meaning += "; the answer came from the wrap-up call"
    return ["", f"stopped   {row.stop_reason}: {meaning}"]


def _unanswered(transcript: Sequence[dict[str, Any]]) -> list[str]:
    """The tools of the last step's calls that have no observation yet."""
    for at in range(len(transcript) - 1, -1, -1):
        message = transcript[at]
        if message["role"] == "assistant":
            calls = message.get("calls") or ([message] if "tool" in message else [])
            answers = [m for m in transcript[at + 1 :] if m["role"] == "tool"]
            waiting = []
            for call in calls:
                name = call.get("tool", call.get("name"))
                # An observation names its call by id when the model gave ids, else by tool.
                match = next(
                    (a for a in answers if a.get("id", a["name"]) == call.get("id", name)), None
                )
                if match is None:
                    waiting.append(str(name))
                else:
                    answers.remove(match)
            return waiting
        if message["role"] != "tool":
            return []
    return []


def _message_lines(message: dict[str, Any]) -> list[str]:
    role = message["role"]
    if role == "user":
        return [f"user      {_short(message['content'])}"]
    if role == "tool":
        mark = "error" if message["is_error"] else "ok"
        return [f"  <- {message['name']} [{mark}]  {_short(message['content'])}"]
    said = [f"  said: {_short(message['text'])}"] if message.get("text") else []
    if "tool" in message:
        return [*said, _call_line(message["tool"], message["args"])]
    if "calls" in message:
        return [*said, *(_call_line(call["name"], call["args"]) for call in message["calls"])]
    if "invalid" in message:
        return [f"  -> (invalid output) {_short(message['invalid'])}"]
    # The answer is what the run is for: shown whole, continuation lines indented.
    return ["answer    " + text(message["content"], exact=True).replace("\n", "\n          ")]


def _call_line(tool: Any, args: Any) -> str:
    return f"  -> {tool}({cut(json.dumps(args), 80)})"


def _short(content: Any) -> str:
    return cut(text(content, exact=True), _WIDTH)


def runs_table(rows: Sequence[RunRow]) -> str:
    if not rows:
        return "no runs"
    header = ("ID", "STATUS", "STOP", "STEPS", "TOKENS", "AGENT", "RELEASE", "CREATED", "WORKER")
    return table(
        header,
        (
            (
                row.id,
                str(row.status),
                str(row.stop_reason or "-"),
                str(row.steps),
                str(row.tokens),
                row.agent_name or (row.agent or "-"),
                row.release or "-",
                _when(row.created_at),
                f"{row.lease_owner} since {_when(row.leased_at)}" if row.lease_owner else "-",
            )
            for row in rows
        ),
    )


def progress(run_id: str, entry: Entry) -> None:
    """One line per step on stderr: the answer alone goes to stdout."""
    c = entry.counters
    if entry.kind is EntryKind.OBSERVATION:
        status = "error" if entry.is_error else "ok"
        said = f"step {entry.step}  tool {entry.tool}  {status}  tokens {c.tokens}"
    elif entry.kind is EntryKind.FINAL:
        said = f"step {entry.step}  final  tokens {c.tokens}"
    elif entry.kind is EntryKind.REFUSED:
        said = f"step {entry.step}  {entry.action_type} refused by a budget  tokens {c.tokens}"
    else:
        return
    line(said, err=True)


def stopped(result: AgentResult) -> None:
    """How the run stopped, on stderr; its answer, if any, on stdout."""
    line(
        f"stopped: {result.stop_reason} after {result.steps} steps, "
        f"{result.tokens} tokens (run {result.run_id})",
        err=True,
    )
    if result.output is not None:
        line(result.output if isinstance(result.output, str) else json.dumps(result.output))


# -- query results (`runner sql`) -------------------------------------------------------------


def query_table(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> str:
    if not columns:
        return "(no result rows)"
    values = list(rows)
    # A column of numbers (and NULLs) is right-aligned under its left-aligned header.
    # PostgreSQL gives NUMERIC for some arithmetic (a SUM of bigints): numbers too.
    right = [
        i
        for i in range(len(columns))
        if values
        and all(isinstance(row[i], int | float | Decimal) or row[i] is None for row in values)
    ]
    cells = [["" if v is None else cut(text(v), _CELL) for v in row] for row in values]
    shown = table(columns, cells, right=right)
    return f"{shown}\n({len(values)} row{'' if len(values) == 1 else 's'})"


def query_csv(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else text(v, exact=True) for v in row])


def query_json(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    from runner.history import plain

    keys = _unique(columns)
    out = sys.stdout
    out.write("[")
    for n, row in enumerate(rows):
        item = {key: plain(value) for key, value in zip(keys, row, strict=True)}
        out.write(("," if n else "") + "\n" + json.dumps(item, ensure_ascii=False))
    out.write("\n]\n")


def _unique(columns: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    keys = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return keys


# -- the stop-reason distribution (`runner stats`) --------------------------------------------


def stats_json(
    by: str, since: datetime | None, min_rise: float, groups: list[Group]
) -> dict[str, Any]:
    from runner.history import plain

    return {
        "by": by,
        "since": plain(since),
        "min_rise": min_rise,
        "groups": [
            {
                "group": g.label,
                "agent_name": g.agent_name,
                "release": g.release,
                "day": g.day,
                "runs": g.runs,
                "first_run_at": plain(g.first_run_at),
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


def stats_table(by: str, groups: list[Group], min_rise: float) -> str:
    if not groups:
        return "no finished runs"
    total: dict[str, int] = {}
    for g in groups:
        for s in g.shares:
            total[s.stop_reason] = total.get(s.stop_reason, 0) + s.count
    reasons = sorted(total, key=lambda r: (r != "final", -total[r], r))
    counts = {
        reason: max(len(str(s.count)) for g in groups for s in g.shares if s.stop_reason == reason)
        for reason in reasons
    }
    rows = []
    for g in groups:
        shares = {s.stop_reason: s for s in g.shares}
        flagged = {r.stop_reason for r in g.rises}
        row = [g.label, str(g.runs)]
        for reason in reasons:
            share = shares.get(reason)
            width = counts[reason]
            cell = f"{share.count:>{width}} {share.percent:5.1f}%" if share else "-".rjust(width)
            row.append(cell + (" ^" if reason in flagged else ""))
        rows.append(row)
    lines = [table([by.upper(), "RUNS", *reasons], rows, right=[1], right_headers=[1])]
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


# -- prune (`runner prune`) -----------------------------------------------------------------


def pruned_json(pruned: Pruned, finished_before: datetime, dry_run: bool) -> dict[str, Any]:
    from runner.history import plain

    return {
        "dry_run": dry_run,
        "finished_before": plain(finished_before),
        "runs": pruned.runs,
        "entries": pruned.entries,
        "stop_reasons": dict(pruned.reasons.most_common()),
    }


def pruned_line(pruned: Pruned, finished_before: datetime, dry_run: bool) -> str:
    verb = "would remove" if dry_run else "removed"
    when = finished_before.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    detail = ", ".join(f"{reason} {n}" for reason, n in pruned.reasons.most_common())
    return (
        f"{verb} {pruned.runs} runs finished before {when}"
        + (f" ({detail})" if detail else "")
        + f" and {pruned.entries} journal entries"
    )
