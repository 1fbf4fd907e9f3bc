"""The one exception family runner raises, each with a message a user can act on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RunnerError(Exception):
    """Base class of every error runner raises on purpose."""


class RunNotFound(RunnerError):
    """No run has this id (or no run id starts with this prefix)."""


class AmbiguousRunId(RunnerError):
    """A run id prefix matches more than one run."""


class LeaseLost(RunnerError):
    """Another worker claimed the run: this worker must stop writing at once."""


class LeaseHeld(RunnerError):
    """The run is being executed by a live worker."""


class ReplayMismatch(RunnerError):
    """The journal holds something other than what the loop expects at this point.

    `step` is the step where the two part, `recorded` what the journal holds there (an
    `Entry`, or None past its end) and `now` what the code decides instead, in words.
    """

    def __init__(
        self, message: str, *, step: int | None = None, recorded: Any = None, now: str = ""
    ) -> None:
        super().__init__(message)
        self.step = step
        self.recorded = recorded
        self.now = now


class RequestRefused(RunnerError):
    """What was asked cannot be done as asked: the command line exits 2 (a usage error)."""


class BadScore(RequestRefused):
    """A score's name or value is not one runner keeps (a scorer's return included)."""


class ScheduleNotFound(RunnerError):
    """No schedule has this name."""


class ScheduleExists(RequestRefused):
    """A schedule of this name exists already."""


class RunConflict(RequestRefused):
    """A run id already names a run with another agent, task or budgets.

    The id is an idempotency key for the run itself: the same request returns the existing
    run, a different one is refused. `differences` maps each differing field to
    (stored, asked).
    """

    def __init__(
        self, message: str, *, run_id: str, differences: dict[str, tuple[Any, Any]]
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.differences = differences


class SubmissionRefused(RequestRefused):
    """An item of a bulk submit is malformed, or names a run that exists with another
    request: nothing was submitted. `item` is its number (1 for the first), `reason` why."""

    def __init__(self, reason: str, *, item: int) -> None:
        super().__init__(f"item {item}: {reason}")
        self.item = item
        self.reason = reason


class SubmitInterrupted(RunnerError):
    """A bulk submit failed part of the way: the batches before item `item` are submitted
    (`submitted`: their run ids, in order), nothing of that batch or after it is."""

    def __init__(self, reason: str, *, item: int, submitted: list[str]) -> None:
        super().__init__(
            f"item {item}: {reason}; {len(submitted)} runs before it were submitted, "
            "nothing from it on"
        )
        self.item = item
        self.reason = reason
        self.submitted = submitted


class CannotContinue(RequestRefused):
    """The run cannot go on as asked: it answered, or the new budgets leave it no room."""


class CannotFork(RequestRefused):
    """The run cannot be forked at that step (it has no such complete step)."""


class AgentLoadError(RunnerError):
    """An agent reference (`module:attr` or `path.py:attr`) cannot be loaded."""


class BadAgentReference(AgentLoadError, RequestRefused):
    """An agent reference is malformed: not `module:attr` nor `path.py:attr`."""


class SchemaOutOfDate(RunnerError):
    """The database is not migrated to the revision this runner needs."""


class SchemaTooNew(SchemaOutOfDate):
    """The database was migrated by a newer runner, to a revision this one does not know."""


class DatabaseUnavailable(RunnerError):
    """The database cannot be reached or opened."""


class DatabaseRefused(DatabaseUnavailable):
    """The database refuses this URL for good (no such role, database or folder, a bad
    password, not a URL at all): unlike a server that is away, waiting will not help."""


class DatabaseCorrupt(RunnerError):
    """The database file is damaged, or is not a database at all: no retry can mend it."""


class EntryRefused(RunnerError):
    """The database refused a journal entry for good (not a blip): the run was stopped."""


class QueryFailed(RunnerError):
    """The database rejected a `runner sql` query (a write, or an error in the SQL)."""


class RunPaused(RunnerError):
    """The run was asked to pause (its worker is shutting down): resume it later."""


class RunWaiting(RunnerError):
    """The run waits for a person's answer to a call: it holds no worker until one comes.

    A durable `Runner` turns this into a result whose status is `waiting`; `run_agent`, which
    has nobody to answer, lets it out. `waits_for` says for what: `sub-agents` (the ends of
    the child runs it started), `answer` (a person's), or both.
    """

    def __init__(self, message: str, *, run_id: str, waits_for: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.waits_for = tuple(waits_for)


class LimitNotFound(RunnerError):
    """No provider limit has this name."""


class RunParked(RunnerError):
    """The run's next model call found no room in its limit (`limit`; None: in its tree's
    budget, held by calls in flight): the run was queued again, to be claimed no earlier than
    `until` (seconds since the epoch), holding no worker meanwhile."""

    def __init__(self, message: str, *, run_id: str, limit: str | None, until: float) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.limit = limit
        self.until = until


class NotWaiting(RunnerError):
    """An answer came for a run that waits for none (finished, queued, running, or answered)."""


class WrongAnswer(RunnerError):
    """The run waits for another kind of answer (a reply, not an approval) or another call."""


class RunFinished(RunnerError):
    """A message was sent to a run that has stopped: nothing would read it (send it with
    `--revive`, `revive=True`, to continue the run with it)."""


class MessageRefused(RequestRefused):
    """A message the run cannot take: its key names another message, or its body does not
    fit what the agent accepts (`Agent(accepts=...)`)."""


class MessageConflict(MessageRefused):
    """A message's key was sent to the run before with another message."""


class MissingExtra(RunnerError):
    """An optional dependency is not installed: the message names the extra to install."""


class MCPUnavailable(RunnerError):
    """An MCP server could not be started or reached, or its session broke: the message
    names the server and the cause."""


class ModelFatal(RunnerError):
    """A model call failed in a way no retry can fix (a bad key, a rejected request).

    Raised by a model callable, it stops the run at once with `model_error`.
    """


class ModelRetryable(RunnerError):
    """A model call failed for now (a rate limit, an overload): retry it later.

    `retry_after` is how many seconds the provider asked to wait; the loop waits at least
    that long (and never past the run's deadline) before its next attempt.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def describe(exc: BaseException) -> str:
    """`Type: first line of the message`, naming the driver's own error under SQLAlchemy's."""
    inner = getattr(exc, "orig", None) or exc
    return f"{type(inner).__name__}: {first_line(exc)}"


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (a driver's own message, under SQLAlchemy's)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PayloadError(RunnerError):
    """A stored payload cannot be read back: a codec it was written with is not configured
    here, its blob is missing, or it does not decode to what was written."""


class KeyMissing(PayloadError):
    """A payload was encrypted with a key this process's key ring does not hold, or with
    a key of that id that is not the key it holds: the message names the key id."""
