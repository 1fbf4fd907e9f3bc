"""What a worker says: the `runner.worker` logger, a worker's voice on it, and the wording
of its lines about runs.

Every part of a worker (runner.service.worker and the modules it owns) logs through one
`WorkerLog`, so each record carries the worker's name (`record.worker`) and, about a run,
the run's id (`record.run_id`): `runner worker` configures the handler (text or JSON lines
on stderr) and relies on both.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from runner.core.tree import child_run_id
from runner.core.waiting import Asks, Wait

log = logging.getLogger("runner.worker")


class WorkerLog:
    """A worker's voice on the `runner.worker` logger: `say(level, message, run_id)`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, level: int, message: str, run_id: str | None = None) -> None:
        extra = {"worker": self.name} if run_id is None else {"worker": self.name, "run_id": run_id}
        log.log(level, message, extra=extra)


def why(error: str | None) -> str:
    """`: <the error's first line>` for a run that stopped with one (a model_error)."""
    said = (error or "").strip()
    return f": {said.splitlines()[0]}" if said else ""


def counted(count: int, word: str) -> str:
    """`1 run`, `2 runs`."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def waiting_words(run_id: str, waits: Sequence[Wait]) -> str:
    """What a run released while it waits is waiting for: a person's answer, or the end of
    the child runs its sub-agent calls started (which workers run: no person is needed)."""
    people = [wait for wait in waits if wait.asks is not Asks.CHILD]
    children = [child_run_id(run_id, wait.call) for wait in waits if wait.asks is Asks.CHILD]
    what = [f"for {wait.asks} of {wait.question} (call {wait.call})" for wait in people]
    until = ["a person answers"] if people else []
    if children:
        one = len(children) == 1
        what.append(f"for its child run{'' if one else 's'} {', '.join(children)}")
        until.append("it ends" if one else "they end")
    return f"waits {' and '.join(what)}: released until {' and '.join(until)}"
