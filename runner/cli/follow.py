"""`runner tail`: a run's journal as events, after a position, followed as it is written."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from runner.cli import output, run_output
from runner.cli.options import db_option, json_option
from runner.cli.runs import EXIT_FINAL, EXIT_INTERRUPTED, EXIT_STOPPED, EXIT_WAITING
from runner.core.result import AgentResult
from runner.core.status import RunStatus
from runner.core.stop_reasons import StopReason
from runner.service import documents

if TYPE_CHECKING:
    from runner.service.events import DeltaEvent, Event, EventStream
    from runner.service.runner import Runner
    from runner.service.tree_events import TreeStream


@click.command()
@click.argument("run_id", metavar="ID")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Go on printing entries as they are committed, until the run stops or waits for a person.",
)
@click.option(
    "--after",
    type=click.IntRange(min=-1),
    default=-1,
    metavar="N",
    help="Only the entries after position N (positions start at 0; --json gives each one's).",
)
@click.option(
    "--tree",
    is_flag=True,
    help="Also the entries of every run below it (its sub-agents' child runs, theirs, ...), "
    "each line naming its run; --after is a position of run ID's own journal.",
)
@db_option
@json_option
def tail(run_id: str, follow: bool, after: int, tree: bool, url: str | None, as_json: bool) -> None:
    """Print run ID's journal entries after position N, as `runner show` prints them, then
    how the run stands (its stop line); with --follow, each new entry as it is committed,
    from any process, until the run stops or waits for a person.

    The model call in flight is shown as it streams (a model with `stream=True`): its text
    and tool arguments as they come, then its entry once journaled. With --json each piece
    is an `"event": "delta"` object with no position of its own (`after`: the last
    position before it; `step`, `ordinal`, `part`, `call`, `tool`, `text`).

    --json prints one object a line: each entry with its `run_id` and `position` (resume
    with `--after POSITION`), then an `"event": "end"` object with the run as `show --json`
    gives it. With --tree, a follow goes on until every run of the tree has finished (or
    none is queued or running and one waits for a person). A run waiting for its sub-agents'
    child runs waits for no person: a follow goes on. Exit codes as for `runner run`: 0 for
    a final answer, 3 for any other stop, 4 for a run that waits for a person; 0 for a run
    not stopped yet (without --follow), or one that waits for its child runs.
    """
    # Imported here: the durable runner loads SQLAlchemy, which `runner --help` does without.
    from runner.service.events import DeltaEvent
    from runner.service.runner import Runner

    with Runner(url) as runner:
        stream: TreeStream[Event | DeltaEvent] | EventStream[Event | DeltaEvent] = (
            runner.tree_events(run_id, after=after, follow=follow, until_waiting=True, deltas=True)
            if tree
            else runner.events(run_id, after=after, follow=follow, until_waiting=True, deltas=True)
        )
        streamed = _Streamed(named=tree)
        try:
            for event in stream:
                if as_json:
                    if isinstance(event, DeltaEvent):
                        output.print_json(documents.delta_json(event))
                    else:
                        output.print_json(documents.event_json(event))
                elif isinstance(event, DeltaEvent):
                    streamed.show(event)
                else:
                    streamed.end()
                    if said := run_output.event_lines(event):  # some entries show nothing
                        output.line(_named(event.run_id, said) if tree else said)
            streamed.end()
        except KeyboardInterrupt:
            streamed.end()
            again = f"runner tail {stream.run_id} --follow --after {stream.position}"
            output.line(f"interrupted: `{again}` goes on from here", err=True)
            sys.exit(EXIT_INTERRUPTED)
        result = runner.get(stream.run_id)
        row = runner.row(stream.run_id)
        # A run waiting for its children alone: the runs below that wait for a person are
        # what the tree waits for (their answers, and the exit code, are theirs).
        below = [] if _waits_for_a_person(result) else _waiting_below(runner, stream.run_id, result)
    if as_json:
        end = {"event": "end", "position": stream.position}
        output.print_json(end | documents.run_json(result, row))
    else:
        output.line(run_output.ending_lines(result, row))
        if _waits_for_a_person(result):
            run_output.waiting(result)
        for waiting in below:
            run_output.waiting(waiting)
        if result.status is RunStatus.WAITING and not below and not _waits_for_a_person(result):
            output.line(
                f"run {result.run_id} waits for its child runs, which workers run: "
                f"`runner tail {result.run_id} --follow --tree` follows them",
                err=True,
            )
    sys.exit(EXIT_WAITING if below else _exit_code(result))


def _waiting_below(runner: Runner, run_id: str, result: AgentResult) -> list[AgentResult]:
    """The runs below a run waiting for its children that wait for a person."""
    if result.status is not RunStatus.WAITING:
        return []
    tree = runner.tree(run_id).find(run_id)
    if tree is None:
        return []
    waiting = [
        runner.get(below.row.id)
        for below in tree.walk()
        if below.row.id != run_id and below.row.status is RunStatus.WAITING
    ]
    return [each for each in waiting if _waits_for_a_person(each)]


def _waits_for_a_person(result: AgentResult) -> bool:
    """A waiting run that needs an approval or a reply, not its child runs' ends alone."""
    if result.status is not RunStatus.WAITING:
        return False
    waits = result.waits or ([result.waiting] if result.waiting else [])
    return not waits or any(str(wait.asks) != "child" for wait in waits)


def _named(run_id: str, said: str) -> str:
    """An entry's lines, each led by its run's id (`runner tail --tree`)."""
    return "\n".join(f"[{run_id}] {line}" for line in said.splitlines())


class _Streamed:
    """The model call in flight, as it streams: one line a step and part (its text, or a
    tool call's arguments), written piece by piece, ended before anything else is written."""

    def __init__(self, *, named: bool = False) -> None:
        self.named = named  # each line led by its run's id (a tree's runs stream at once)
        self.open: tuple[str, int, str, int] | None = None

    def show(self, event: DeltaEvent) -> None:
        delta = event.delta
        now = (event.run_id, delta.step, delta.part, delta.call)
        if self.open != now or delta.ordinal == 0:  # another part, or the call began again
            self.end()
            label = "streams" if delta.part == "text" else f"streams {delta.tool or 'a call'}"
            run = f"[{event.run_id}] " if self.named else ""
            output.partial(f"{run}step {delta.step} {label}: ")
            self.open = now
        output.partial(output.printable(delta.text))

    def end(self) -> None:
        if self.open is not None:
            output.line("")
            self.open = None


def _exit_code(result: AgentResult) -> int:
    if _waits_for_a_person(result):
        return EXIT_WAITING
    if result.stop_reason is None or result.stop_reason == StopReason.FINAL:
        return EXIT_FINAL
    return EXIT_STOPPED
