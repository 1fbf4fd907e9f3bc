"""What `runner run`, `resume` and `fork` show while a run goes.

On a terminal (stderr), a live line for the step in flight, redrawn by rich: the tool and
its arguments cut short, or "asking the model", and the time so far; each finished step
is printed above it as its plain line. Anywhere else (a pipe, a file, click's CliRunner)
only the plain lines, one per finished step, exactly as before: scripts read them.
rich is imported only when the output is a terminal.
"""

from __future__ import annotations

import json
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from runner.cli import output, run_output
from runner.core.actions import ActionKind
from runner.core.journal import Entry, EntryKind

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live
    from rich.spinner import Spinner

_ARGS = 40  # characters of a call's arguments on the live line


class Progress:
    """The observer of a run's journal writes, as a context manager around the run."""

    def __init__(self, *, live: bool | None = None) -> None:
        self.started = time.monotonic()
        self._console: Console | None = None
        if live is None or live:
            from rich.console import Console

            console = Console(stderr=True, highlight=False, markup=False, emoji=False)
            if live or console.is_terminal:
                self._console = console
        self._live: Live | None = None
        self._spinner: Spinner | None = None
        self._doing = "starting"
        self._since = self.started
        self._lock = threading.Lock()

    @property
    def live(self) -> bool:
        return self._console is not None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __enter__(self) -> Progress:
        if self._console is not None:
            from rich.live import Live
            from rich.spinner import Spinner

            self._spinner = Spinner("dots")
            self._live = Live(
                self,
                console=self._console,
                refresh_per_second=8,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __rich__(self) -> Any:
        """The live line, as rich redraws it: what the run is doing, and for how long."""
        from rich.text import Text

        assert self._spinner is not None
        with self._lock:
            doing, since = self._doing, self._since
        self._spinner.text = Text(f"{doing}  {output.duration(time.monotonic() - since)}")
        return self._spinner

    def __call__(self, run_id: str, entry: Entry) -> None:
        """After each journal commit: print a finished step, say what comes next."""
        said = run_output.progress_line(entry)
        if self._console is None:
            if said is not None:
                output.line(said, err=True)
            return
        self._now(_next(entry))
        if said is not None:
            self._console.print(said)

    def _now(self, doing: str) -> None:
        with self._lock:
            self._doing, self._since = doing, time.monotonic()


def _next(entry: Entry) -> str:
    """What the run does after `entry` was committed."""
    step = entry.counters.steps
    if entry.kind is EntryKind.ACTION and entry.action_type is ActionKind.TOOL:
        return f"step {entry.step}  {entry.tool}({_arguments(entry.args)})  running"
    if entry.kind is EntryKind.WRAP_UP:
        return f"step {entry.step}  asking the model for its last answer"
    if entry.kind in (EntryKind.FINAL, EntryKind.REFUSED):
        return "stopping"
    return f"step {step + 1}  asking the model"


def _arguments(args: dict[str, Any] | None) -> str:
    shown = ", ".join(f"{name}={json.dumps(value)}" for name, value in (args or {}).items())
    return output.cut(shown, _ARGS)
