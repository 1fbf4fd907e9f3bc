"""The one way out for every command: lines, tables, CSV, JSON and colour.

Tables are laid out by rich: columns two spaces apart, never wrapped to the terminal's
width, header in bold on a terminal only. Colour honours NO_COLOR and is off when stdout is
not a terminal (a pipe, a file, click's CliRunner): there the text has no escape codes.
rich is imported only by the commands that print a table: `runner --help` never loads it.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import click

from runner.core.journal import Entry, EntryKind
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.core.utf8 import utf8_safe

if TYPE_CHECKING:
    from rich.console import Console

    from runner.core.waiting import Answered, Wait
    from runner.history import Group, Pruned
    from runner.service.replay import Replay
    from runner.service.values import QueueInfo, RunRow

# A table cell: its text, or (text, rich style) for a coloured one.
Cell = str | tuple[str, str]

_WIDTH = 100  # `show` cuts an observation to this; --full and --json have it whole
_CELL = 60  # a `runner sql` cell is cut to this; --csv and --json give values whole
# Wide enough that no table is ever wrapped or cut: lines are as long as their cells.
_UNBOUNDED = 1_000_000


# -- lines and JSON -------------------------------------------------------------------------


def line(text: str, *, err: bool = False) -> None:
    """One line (or several) on stdout, or on stderr with `err` (lone surrogates escaped:
    no stream can carry them, see runner.core.utf8)."""
    click.echo(utf8_safe(text), err=err)


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


# What a terminal would obey rather than show: C0 controls (but tab and newline), DEL, C1
# controls (U+0080 to U+009F: 0x9B alone starts an escape sequence on some terminals), and
# the bidirectional overrides that make text read differently from what it is.
# Lone surrogates too (U+D800 to U+DFFF): the journal keeps them, no terminal can show them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\r`), so that
    what a model or a tool said cannot clear the screen, retitle the window or hide a line.
    Newlines and tabs stay; whoever lays the text out decides what to do with them."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r":
        return "\\r"
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def cut(text: str, width: int) -> str:
    """`text` on one line (control characters escaped), cut to `width` characters with `...`."""
    # A CRLF is a line ending like a newline; a lone carriage return (which would write
    # over the line) is shown escaped.
    text = printable(text.replace("\r\n", " \n")).replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def plural(count: int, word: str) -> str:
    """`1 step`, `2 steps`."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def duration(seconds: float) -> str:
    """A span as a person reads it: `0.4s`, `12s`, `4m07s`, `2h03m`, `3d04h`."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def cost_text(cost: float, tokens: int) -> str:
    """`cost 0.0123`; `cost unknown` when tokens were spent at no recorded cost (a model
    adapter with no price for its model records 0, never a made-up figure)."""
    return "cost unknown (no price)" if cost == 0 and tokens > 0 else f"cost {cost:g}"


def ago(then: datetime | None, now: datetime) -> str:
    """`4m07s ago`, `just now`, or `-` for no time at all."""
    if then is None:
        return "-"
    seconds = (now - then).total_seconds()
    return "just now" if seconds < 1 else f"{duration(seconds)} ago"


def styled(text: str, style: str) -> str:
    """`text` in a rich style on a terminal (colours off with NO_COLOR); as is elsewhere."""
    from rich.text import Text

    console = _console()
    if not console.is_terminal:
        return text
    with console.capture() as captured:
        console.print(Text(text, style=style), end="")
    return captured.get()


# Colours of a run's state, and of its stop reason (final is the good ending).
_STATE_STYLES = {"queued": "cyan", "running": "blue", "stalled": "bold red", "waiting": "magenta"}


def state_style(state: str, stop_reason: str | None) -> str:
    if state == "finished":
        return "green" if stop_reason == "final" else "yellow"
    return _STATE_STYLES.get(state, "")


# -- tables ---------------------------------------------------------------------------------


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[Cell]],
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
        title = Text(printable(name), justify="right" if i in right_headers else "left")
        title.stylize("bold")  # the name only, not the spaces around it
        grid.add_column(
            title,
            justify="right" if i in right else "left",
            no_wrap=True,
        )
    for row in rows:
        # A cell is one line: rich would widen a tab past the width it measured.
        grid.add_row(*(_cell(cell) for cell in row))
    console = _console()
    with console.capture() as captured:
        console.print(grid)
    return "\n".join(printed.rstrip() for printed in captured.get().splitlines())


def _cell(cell: Cell) -> Any:
    from rich.text import Text

    value, style = (cell, "") if isinstance(cell, str) else cell
    return Text(printable(value).replace("\t", " "), style=style)


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
    result: AgentResult | None,
    row: RunRow | None = None,
    *,
    transcript: bool = False,
    wait: Wait | None = None,
) -> dict[str, Any]:
    """The machine-readable form of a run (`wait`: what it waits for, if not in `result`)."""
    data: dict[str, Any] = {}
    # How the run ended (or stands): from the result when there is one, else from the row.
    source = result if result is not None else row
    if source is not None:
        data["id"] = result.run_id if result is not None else row.id if row else None
        data.update({name: getattr(source, name) for name in _OUTCOME})
    if row is not None:
        data.update(
            state=row.state or str(row.status),
            agent=row.agent,
            agent_name=row.agent_name,
            release=row.release,
            task=row.task,
            budgets=row.budgets,
            resumes=row.resumes,
            cancel_requested=row.cancel_requested,
            worker=row.lease_owner,
            worker_since=_iso(row.leased_at) if row.lease_owner else None,
            last_seen_at=_iso(row.last_seen_at),
            lease_expires_at=_iso(row.lease_expires_at),
            parent_run_id=row.parent_run_id,
            parent_step=row.parent_step,
            queue=row.queue,
            priority=row.priority,
            not_before=_iso(row.not_before),
            created_at=_iso(row.created_at),
            finished_at=_iso(row.finished_at),
        )
    if transcript and result is not None:
        data["transcript"] = result.transcript
    if source is not None:
        if wait is None and result is not None:
            wait = result.waiting
        data["waiting"] = wait_json(wait) if wait is not None else None
    return data


def wait_json(wait: Wait) -> dict[str, Any]:
    """What a waiting run waits for, and the commands that answer it."""
    return {
        "asks": str(wait.asks),
        "call": wait.call,
        "step": wait.step,
        "tool": wait.tool,
        "args": wait.args,
        "question": wait.question,
        "since": _iso(wait.since),
        "expires_at": _iso(wait.expires_at),
        "answer_with": answer_commands(wait),
    }


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def render_run(
    result: AgentResult,
    row: RunRow,
    journal: Sequence[Entry] | None = None,
    now: datetime | None = None,
    *,
    full: bool = False,
    stalled: str | None = None,
) -> str:
    """A readable transcript with the run's header; `full` shows every value whole, and
    control characters are escaped throughout (the task, the model's words and the tools'
    results may hold anything).

    With the run's `journal`, the entries the model never saw (budget changes, refusals)
    are shown too; with `now`, how long ago things happened. `stalled` says why a stalled
    run is (runner.liveness.stall_reason)."""
    state = row.state or str(row.status)
    status = state + (f": {row.stop_reason}" if row.stop_reason else "")
    if stalled:
        status += f" ({stalled}; a worker or `runner resume {row.id}` takes it over)"
    lines = [
        f"run       {row.id}",
        f"agent     {row.agent or '-'}" + _agent_label(row),
        f"status    {styled(status, state_style(state, row.stop_reason))}",
        f"counters  {plural(result.steps, 'step')}, {plural(result.tokens, 'token')}, "
        f"{cost_text(result.cost, result.tokens)}, {plural(row.resumes, 'resume')}",
        f"created   {_when(row.created_at)} UTC"
        + (f" ({ago(row.created_at, now)})" if now is not None else "")
        + (f", finished {_when(row.finished_at)} UTC" if row.finished_at else ""),
    ]
    lines.append(f"queue     {row.queue}, priority {row.priority}" + _delayed(row, now))
    if row.parent_run_id:
        lines.append(f"forked    from run {row.parent_run_id} at step {row.parent_step}")
    if row.lease_owner:
        seen = row.last_seen_at or row.leased_at
        lines.append(
            f"worker    {row.lease_owner} since {_when(row.leased_at)} UTC"
            + (f", last seen {ago(seen, now)}" if now is not None else "")
        )
    if result.waiting is not None:
        lines.extend(wait_lines(result.waiting))
    if row.error:
        lines.append(f"error     {row.error}")
    lines.append("")
    width = None if full else _WIDTH
    if journal is None:
        for message in result.transcript:
            lines.extend(_message_lines(message, width))
    for entry in journal or ():
        lines.extend(_entry_lines(entry, width))
    lines.extend(_ending(result, row))
    return printable("\n".join(lines).replace("\r\n", "\n"))


def _delayed(row: RunRow, now: datetime | None) -> str:
    """`, starts 2026-12-01 12:00:00 UTC (in 9m00s)` for a queued run still delayed."""
    if row.status is not RunStatus.QUEUED or row.not_before is None:
        return ""
    if now is not None and row.not_before <= now:
        return ""
    when = f", starts {_when(row.not_before)} UTC"
    return when + (f" (in {duration((row.not_before - now).total_seconds())})" if now else "")


def _queue_cell(row: RunRow, now: datetime) -> str:
    """`batch`, `batch +5` (its priority, when not 0), `, in 9m00s` while it is delayed."""
    cell = row.queue + (f" {row.priority:+d}" if row.priority else "")
    start = row.not_before
    if row.status is RunStatus.QUEUED and start is not None and start > now:
        cell += f", in {duration((start - now).total_seconds())}"
    return cell


def _agent_label(row: RunRow) -> str:
    release = f"release {row.release}" if row.release else None
    labels = [label for label in (row.agent_name, release) if label]
    return f"  ({', '.join(labels)})" if labels else ""


def _ending(result: AgentResult, row: RunRow) -> list[str]:
    """How the transcript ends: the stop and what it means, or the call still in flight."""
    if row.stop_reason is None:
        if result.waiting is not None:
            wait = result.waiting
            return [f"  .. {wait.tool}: waits for a person's {wait.asks} (see above)"]
        return [
            f"  .. {name}: no result yet (running, or a resume will settle it)"
            for name in _unanswered(result.transcript)
        ]
    meaning = StopReason(row.stop_reason).explained(row.budgets, row.error)
    if row.wrapped_up:
        meaning += "; the answer came from the wrap-up call"
    return ["", f"stopped   {row.stop_reason}: {meaning}"]


def _entry_lines(entry: Entry, width: int | None) -> list[str]:
    """One journal entry as `show` prints it: its message, or what the model never saw."""
    if entry.kind in (EntryKind.REVIVED, EntryKind.EXTENDED):
        return [f"  == {entry.content}"]
    if entry.kind is EntryKind.REFUSED:
        what = f"{entry.tool}(...)" if entry.tool else str(entry.action_type)
        return [f"  x> {what} refused by a stop rule"]
    message = entry.message()
    return [] if message is None else _message_lines(message, width)


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


def _message_lines(message: dict[str, Any], width: int | None = _WIDTH) -> list[str]:
    role = message["role"]
    if role == "user":
        return [f"user      {_short(message['content'], width)}"]
    if role == "tool":
        mark = "error" if message["is_error"] else "ok"
        return [f"  <- {message['name']} [{mark}]  {_short(message['content'], width)}"]
    said = [f"  said: {_short(message['text'], width)}"] if message.get("text") else []
    if "tool" in message:
        return [*said, _call_line(message["tool"], message["args"], width)]
    if "calls" in message:
        calls = message["calls"]
        return [*said, *(_call_line(call["name"], call["args"], width) for call in calls)]
    if "invalid" in message:
        return [f"  -> (invalid output) {_short(message['invalid'], width)}"]
    # The answer is what the run is for: shown whole, continuation lines indented.
    return ["answer    " + text(message["content"], exact=True).replace("\n", "\n          ")]


def _call_line(tool: Any, args: Any, width: int | None = _WIDTH) -> str:
    shown = json.dumps(args)
    return f"  -> {tool}({shown if width is None else cut(shown, 80)})"


def _short(content: Any, width: int | None = _WIDTH) -> str:
    """A value on one line, cut to `width` (None: whole, continuation lines indented)."""
    if width is None:
        return text(content, exact=True).replace("\n", "\n          ")
    return cut(text(content, exact=True), width)


def runs_table(rows: Sequence[RunRow], now: datetime) -> str:
    if not rows:
        return "no runs"
    header = (
        "ID", "STATUS", "STOP", "STEPS", "TOKENS", "AGENT", "RELEASE", "QUEUE", "CREATED", "TIME",
        "WORKER",
    )  # fmt: skip
    return table(
        header,
        (
            (
                row.id,
                (row.state, state_style(row.state, row.stop_reason)),
                (str(row.stop_reason), state_style("finished", row.stop_reason))
                if row.stop_reason
                else "-",
                str(row.steps),
                str(row.tokens),
                row.agent_name or (row.agent or "-"),
                row.release or "-",
                _queue_cell(row, now),
                ago(row.created_at, now),
                duration(((row.finished_at or now) - row.created_at).total_seconds()),
                f"{row.lease_owner}, seen {ago(row.last_seen_at or row.leased_at, now)}"
                if row.lease_owner
                else "-",
            )
            for row in rows
        ),
        right=(3, 4, 9),
    )


def progress_line(entry: Entry) -> str | None:
    """The line a finished step prints on stderr (None for entries that finish no step)."""
    c = entry.counters
    if entry.kind is EntryKind.WAIT:
        return f"step {entry.step}  tool {entry.tool}  waits for {entry.waits_for}: {entry.content}"
    if entry.kind is EntryKind.OBSERVATION:
        status = "error" if entry.is_error else "ok"
        return f"step {entry.step}  tool {entry.tool}  {status}  tokens {c.tokens}"
    if entry.kind is EntryKind.FINAL:
        return f"step {entry.step}  final  tokens {c.tokens}"
    if entry.kind is EntryKind.REFUSED:
        return f"step {entry.step}  {entry.action_type} refused by a budget  tokens {c.tokens}"
    return None


def progress(run_id: str, entry: Entry) -> None:
    """One line per step on stderr: the answer alone goes to stdout."""
    said = progress_line(entry)
    if said is not None:
        line(printable(said), err=True)


def stopped(result: AgentResult, seconds: float | None = None) -> None:
    """How the run stopped, on stderr; its answer, if any, on stdout."""
    took = f", {duration(seconds)}" if seconds is not None else ""
    # Why the model failed is the one thing a person needs next (a missing key, a refused
    # request): its first line ends the stop line.
    reason = (result.error or "").strip()
    why = f": {reason.splitlines()[0]}" if reason else ""
    line(
        printable(
            f"stopped: {result.stop_reason} after {plural(result.steps, 'step')}, "
            f"{plural(result.tokens, 'token')}, {cost_text(result.cost, result.tokens)}{took} "
            f"(run {result.run_id}){why}"
        ),
        err=True,
    )
    if result.output is not None:
        line(result.output if isinstance(result.output, str) else json.dumps(result.output))


def replay_lines(report: Replay, agent: str | None) -> str:
    """What a replay found, for a person: agreement, or the first step that differs."""
    against = f" against {agent}" if agent else ""
    lines = [
        f"replayed run {report.run_id}{against}: {plural(report.steps, 'recorded step')}, "
        "no model called, no tool run"
    ]
    if report.agrees:
        stop = f" and its stop ({report.stop_reason})" if report.stop_reason else ""
        lines.append(styled(f"agrees: the agent takes every recorded step{stop} again", "green"))
    else:
        lines.append(styled(f"differs at step {report.step}:", "bold red"))
        lines.append(f"  recorded  the run {report.recorded}")
        lines.append(f"  now       the agent {report.now}")
    if report.note:
        lines.append(f"note: {report.note}")
    return "\n".join(lines)


def replay_json(report: Replay, agent: str | None) -> dict[str, Any]:
    return {
        "id": report.run_id,
        "agent": agent,
        "agrees": report.agrees,
        "steps": report.steps,
        "stop_reason": report.stop_reason,
        "step": report.step,
        "recorded": report.recorded,
        "now": report.now,
        "note": report.note,
    }


# -- people in the loop (`run` and `resume` at a wait, `list --status waiting`, answers) ------


def answer_commands(wait: Wait) -> list[str]:
    """The exact commands that answer a wait (naming the call, so an answer never lands on
    a later wait of the same run that its author has not seen)."""
    target = f"{wait.run_id} --call {wait.call}"
    deny = f"runner deny {target} --reason TEXT"
    if str(wait.asks) == "reply":
        return [f"runner reply {target} TEXT", deny]
    return [f"runner approve {target}", deny]


def _asked(wait: Wait) -> str:
    if str(wait.asks) == "reply":
        return f"a reply to: {cut(wait.question, _WIDTH)}"
    return f"approval of {cut(wait.question, _WIDTH)}"


def wait_lines(wait: Wait) -> list[str]:
    """What a run waits for, since when, and how to answer it: `show`'s header lines."""
    lines = [f"waiting   {_asked(wait)} (call {wait.call}) since {_when(wait.since)} UTC"]
    if wait.expires_at is not None:
        lines.append(f"times out {_when(wait.expires_at)} UTC (approval_timeout): then denied")
    lines.append("answer    " + "  |  ".join(answer_commands(wait)))
    return lines


def waiting(result: AgentResult) -> None:
    """A run that stopped to wait: what for and the commands that answer it, on stderr."""
    wait = result.waiting
    if wait is None:
        line(f"run {result.run_id} is waiting", err=True)
        return
    line(f"waiting: run {result.run_id} needs {_asked(wait)}", err=True)
    for command in answer_commands(wait):
        line(f"  {command}", err=True)


def waits_table(rows: Sequence[RunRow], waits: dict[str, Wait]) -> str:
    """Waiting runs: what each waits for, since when, the command that answers it."""
    if not rows:
        return "no runs"
    header = ("ID", "WAITS FOR", "CALL", "SINCE", "ANSWER WITH")
    cells = []
    for row in rows:
        wait = waits.get(row.id)
        if wait is None:  # answered between the two reads: no longer waiting
            cells.append((row.id, "-", "-", "-", f"(now {row.status})"))
            continue
        what = wait.question if str(wait.asks) == "reply" else f"approval: {wait.question}"
        cells.append(
            (row.id, cut(what, _CELL), wait.call, _when(wait.since), answer_commands(wait)[0])
        )
    return table(header, cells)


def answered_line(answered: Answered) -> str:
    by = f" by {answered.by}" if answered.by else ""
    return (
        f"run {answered.run_id}: call {answered.call} {answered.answer}{by}; the run is queued "
        f"again (a worker takes it, or `runner resume {answered.run_id}`)"
    )


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
    writer.writerow([utf8_safe(name) for name in columns])
    for row in rows:
        writer.writerow(["" if v is None else utf8_safe(text(v, exact=True)) for v in row])


def query_json(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    from runner.history import plain

    keys = _unique(columns)
    out = sys.stdout
    out.write("[")
    for n, row in enumerate(rows):
        item = {key: plain(value) for key, value in zip(keys, row, strict=True)}
        # A lone surrogate escaped is JSON's own escape of it: the value round-trips.
        out.write(("," if n else "") + "\n" + utf8_safe(json.dumps(item, ensure_ascii=False)))
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


# -- queues (`runner queue list`) -----------------------------------------------------------


def queues_table(found: Sequence[QueueInfo]) -> str:
    """Each queue's limit and its runs: queued (ready), delayed, running and waiting."""
    if not found:
        return "no queues"
    return table(
        ("QUEUE", "LIMIT", "QUEUED", "DELAYED", "RUNNING", "WAITING"),
        (
            (
                info.name,
                "-" if info.limit is None else str(info.limit),
                str(info.queued),
                str(info.delayed),
                str(info.running),
                str(info.waiting),
            )
            for info in found
        ),
        right=(1, 2, 3, 4, 5),
        right_headers=(1, 2, 3, 4, 5),
    )


def queue_json(info: QueueInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "limit": info.limit,
        "queued": info.queued,
        "delayed": info.delayed,
        "running": info.running,
        "waiting": info.waiting,
    }
