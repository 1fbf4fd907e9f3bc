"""The one way out for every command: lines, JSON, values as text, escaping, colour,
tables and trees. What a run, a transcript or a wait looks like is `runner.cli.run_output`;
query results, stats, prune and queues are `runner.cli.report_output`, both written through
here.

Tables are laid out by rich: columns two spaces apart, never wrapped to the terminal's
width, header in bold on a terminal only. Colour honours NO_COLOR and is off when stdout is
not a terminal (a pipe, a file, click's CliRunner): there the text has no escape codes.
rich is imported only by the commands that print a table: `runner --help` never loads it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from runner.core.utf8 import utf8_safe

if TYPE_CHECKING:
    from rich.console import Console


# A table cell: its text, or (text, rich style) for a coloured one.
Cell = str | tuple[str, str]

CELL_WIDTH = 60  # a table's cell of free text is cut to this; --csv and --json give values whole
# Wide enough that no table is ever wrapped or cut: lines are as long as their cells.
_UNBOUNDED = 1_000_000


# -- lines and JSON -------------------------------------------------------------------------


def line(text: str, *, err: bool = False) -> None:
    """One line (or several) on stdout, or on stderr with `err` (lone surrogates escaped:
    no stream can carry them, see runner.core.utf8)."""
    click.echo(utf8_safe(text), err=err)


def partial(text: str) -> None:
    """Text on stdout with no newline after it, at once (a piece of a line that streams)."""
    click.echo(utf8_safe(text), nl=False)
    sys.stdout.flush()


def print_json(data: Any) -> None:
    line(json.dumps(_tidy(data), default=str))


def _tidy(value: Any) -> Any:
    """`value` with each float to 15 significant digits, as `text` shows it: a cost summed
    from 0.0001 three times is 0.0003, not 0.00030000000000000003 (a double holds 15
    digits exactly; what lies past them is the sum's noise, not the figure)."""
    if isinstance(value, float):
        return float(format(value, ".15g")) if math.isfinite(value) else value
    if isinstance(value, dict):
        return {key: _tidy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_tidy(item) for item in value]
    return value


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
    if _plain():
        return text
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
    rows = list(rows)
    if _plain():
        laid_out = _plain_table(header, rows, right, right_headers)
        if laid_out is not None:
            return laid_out
    return _rich_table(header, rows, right, right_headers)


def _rich_table(
    header: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    right: Collection[int],
    right_headers: Collection[int],
) -> str:
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


def _plain_table(
    header: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    right: Collection[int],
    right_headers: Collection[int],
) -> str | None:
    """What `_rich_table` prints where no style is shown, for a table of one-line ASCII
    cells (one column a character), without loading rich's console and table: on a pipe,
    they cost about as much CPU as all the rest of `runner list` (issue 28). None for any
    other table (wide or zero-width characters, several lines, a tab in a header), whose
    layout is rich's. tests/unit/test_output.py holds the two to the same text."""
    texts = [[printable(name) for name in header]]
    texts += [[_cell_text(cell) for cell in row] for row in rows]
    if not all(value.isascii() and "\n" not in value for row in texts for value in row):
        return None
    if any("\t" in name for name in texts[0]):
        return None
    widths = [max(len(row[i]) for row in texts) for i in range(len(header))]

    def line(row: Sequence[str], right_aligned: Collection[int]) -> str:
        # Right-aligned as rich aligns (its trailing spaces dropped first), left as it is.
        cells = (
            value.rstrip().rjust(width) if i in right_aligned else value.ljust(width)
            for i, (value, width) in enumerate(zip(row, widths, strict=True))
        )
        return "  ".join(cells).rstrip()

    return "\n".join([line(texts[0], right_headers), *(line(row, right) for row in texts[1:])])


def _plain() -> bool:
    """Whether rich would surely see no terminal on stdout (so print no style): stdout is
    not a terminal and neither TTY_COMPATIBLE=1 nor FORCE_COLOR says otherwise. Where this
    says so, a table or a styled word is made without loading rich's console."""
    environ = os.environ
    if environ.get("TTY_COMPATIBLE") == "1" or environ.get("FORCE_COLOR"):
        return False
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:  # a closed stream: rich says "not a terminal" too
        return True


# -- trees ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Branch:
    """A node of a drawn tree: its label (a cell: text, or text and a rich style) and the
    branches below it, drawn in order."""

    label: Sequence[Cell]
    children: Sequence[Branch] = ()


def tree(root: Branch) -> str:
    """`root` and its branches drawn with rich's guide lines, one node a line, never
    wrapped; styles on a terminal only, as for tables."""
    from rich.text import Text
    from rich.tree import Tree

    def label(branch: Branch) -> Text:
        text = Text()
        for i, cell in enumerate(branch.label):
            value, style = (cell, "") if isinstance(cell, str) else cell
            text.append(("  " if i else "") + printable(value).replace("\n", " "), style=style)
        return text

    def grow(node: Tree, branch: Branch) -> None:
        for child in branch.children:
            grow(node.add(label(child)), child)

    drawn = Tree(label(root), guide_style="dim")
    grow(drawn, root)
    console = _console()
    with console.capture() as captured:
        console.print(drawn)
    return "\n".join(printed.rstrip() for printed in captured.get().splitlines())


def _cell(cell: Cell) -> Any:
    from rich.text import Text

    value, style = (cell, "") if isinstance(cell, str) else cell
    return Text(_cell_text(value), style=style)


def _cell_text(cell: Cell) -> str:
    value = cell if isinstance(cell, str) else cell[0]
    return printable(value).replace("\t", " ")


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
