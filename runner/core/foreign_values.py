"""The values that pass between a framework's glue (`runner.integrations`) and its journaled
run (runner.core.foreign): a model response as the journal keeps it (`Reply`), a tool call's
recorded outcome (`Outcome`), the stop raised through the framework's code (`Stopped`), and
the pieces of a streamed response on their way to the run's followers (`Pieces`).

While a live request streams, its pieces go to the run's followers (runner.core.deltas) as a
runner model's do: `ForeignRun.ask` hands the request the call's `DeltaStream`, and `Pieces`
numbers what the framework's stream events carry. The journal still records the complete
response once.

Kept apart from the run so the glue and each side of the run (runner.core.foreign_requests,
runner.core.foreign_calls) share them without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.core.actions import Call
from runner.core.deltas import DeltaStream
from runner.core.journal import Stop


@dataclass(frozen=True)
class Reply:
    """One model response, as the journal keeps it: what the model said, the function tool
    calls it asked for, and, when it answered through an output tool instead of text, that
    call (`output_call`: the framework's way of ending)."""

    text: str | None = None
    calls: tuple[Call, ...] = ()
    output_call: Call | None = None
    tokens: int = 0
    cost: float = 0.0
    # The framework's own JSON of the whole response, when it holds parts the fields above do
    # not say (journaled in a `response` entry and handed back as it was on replay).
    raw: Any = None


@dataclass(frozen=True)
class Outcome:
    """A tool call's outcome as recorded: its text, and whether it failed."""

    content: str
    is_error: bool


class Stopped(Exception):
    """The run must stop here (a budget, a cancel, a divergence): raised through the
    framework's code to the driver, which returns the run's result."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(f"{stop.reason}: {stop.error}" if stop.error else str(stop.reason))
        self.stop = stop


# What a framework's live request returns to `ForeignRun.ask`: the reply in runner's terms
# and whatever the framework needs back (its own response object), handed on untouched.
LiveReply = tuple[Reply, Any]


class Pieces:
    """A streamed response's pieces on their way to the run's followers: its text, and each
    tool call's arguments, the calls numbered from 0 in the order they first appear (the
    framework names them by its own key: a part's index, an output item's)."""

    def __init__(self, stream: DeltaStream) -> None:
        self.stream = stream
        self.calls: dict[Any, int] = {}
        self.tools: dict[Any, str] = {}  # each call's tool, once a piece named it

    def text(self, text: str) -> None:
        self.stream.emit(text)

    def arguments(self, key: Any, text: str, tool: str | None = None) -> None:
        call = self.calls.setdefault(key, len(self.calls))
        if tool:
            self.tools.setdefault(key, tool)
        self.stream.emit(text, part="arguments", call=call, tool=self.tools.get(key))
