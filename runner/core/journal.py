"""The journal protocol the loop writes through, and the in-memory journal of `run_agent`.

The loop records every decision as an `Entry` before it acts on it. A durable journal
(`runner.sqljournal`) commits each `append` in one transaction; the memory journal keeps a list.
On resume the loop replays `recorded()` instead of asking the model or re-running tools.
A step of several tool calls is one row per call and one per observation; `transcript_of`
turns rows back into the messages the model saw.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.sql.journal`, `runner.testing.memory_journal`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from runner.core.actions import ActionKind
from runner.core.counters import Counters
from runner.core.frozen import quick_init
from runner.core.ids import new_run_id
from runner.core.stop_reasons import StopReason
from runner.errors import RunWaiting

# The tree's parts are loaded when a run of a tree first needs them: `runner list` and
# `show` read entries without loading the tree's rules (tests/integration/test_startup_imports).
if TYPE_CHECKING:
    from runner.core.tree import Charged, ChildRun, Place, TreeStop


class EntryKind(StrEnum):
    """What a journal row records."""

    TASK = "task"  # the user's task: the transcript's first message
    ACTION = "action"  # a tool call (or malformed output) that entered the transcript
    OBSERVATION = "observation"  # a tool's result, or the error the model is shown
    FINAL = "final"  # the model's answer
    REFUSED = "refused"  # an action a stop rule refused: kept for audit, not in the transcript
    WRAP_UP = "wrap_up"  # the note asking the model to answer now, its budget spent
    # Budget changes, not in the transcript: a stopped run continued with new budgets
    # (the stop it lifted is kept in the entry), or an unfinished run's budgets changed.
    REVIVED = "revived"
    EXTENDED = "extended"
    WAIT = "wait"  # a call waits for a person (approval or reply): the run is `waiting`
    ANSWER = "answer"  # a person's answer to the wait before it (or its timeout)
    # A call of a tool declared `mark_start` is about to run: a call pending without it
    # never started, and runs on resume instead of being reported OutcomeUnknown.
    START = "start"
    # A message sent to the run (`runner send`): a user turn, journaled by the worker before
    # the model call of the step it belongs to (its key is the sender's idempotency key).
    MESSAGE = "message"
    # The run waited for room in its provider limit before a model call (runner.core.limits):
    # `args` holds the limit and the seconds waited. Not in the transcript, passed over on
    # resume.
    LIMIT_WAIT = "limit_wait"
    # What the servers of the run's listed tools (MCP tools) listed when it started, in
    # `args` by tool name: one entry at step 0, so a resume against a server whose tools
    # changed is stopped (`tools_changed`) instead of going on with other tools. Not in the
    # transcript.
    TOOLS = "tools"
    # A summary of the run's older steps (runner.core.compaction), asked for before the
    # model call of `step`: `content` holds it, `args` what it covers, `tokens` and `cost`
    # what its model call spent (in the counters too). Not in the transcript; a resume, a
    # replay and a fork show the model this summary instead of asking again.
    COMPACTION = "compaction"
    # A framework's model response in full, as the framework's own JSON in `args["response"]`
    # (runner.core.foreign): written with the step's action(s), before them, when the response
    # holds parts they do not say (thinking, reasoning, provider ids), and handed back as it
    # was on resume. Not in the transcript.
    RESPONSE = "response"


@quick_init  # two a step: made faster than a frozen dataclass makes them
@dataclass(frozen=True, slots=True)
class Entry:
    kind: EntryKind
    step: int
    counters: Counters
    content: Any = None  # task, answer, observation text, or the repr of malformed output
    action_type: ActionKind | None = None  # on action-position entries
    tool: str | None = None
    args: dict[str, Any] | None = None
    is_error: bool = False
    error: str | None = None  # why an action was malformed
    idempotency_key: str | None = None
    attempt: int = 1
    tokens: int = 0  # what this model call reported spending
    cost: float = 0.0
    waits_for: str | None = None  # on a wait: `approval` or `reply` (runner.waiting.Asks)
    answer: str | None = None  # on an answer: approved/denied/replied/timed_out
    answered_by: str | None = None  # on an answer: who gave it
    call_id: str | None = None  # the provider's id of the call (action and observation)

    def message(self) -> dict[str, Any] | None:
        """This entry as a transcript message (seed 000's shapes), or None if not shown.

        A tool call's action holds the text the model gave beside its call(s), if any, in
        `content`: shown as "text", with the provider's id as "id" (neither key when the
        model gave none, so seed runs keep seed 000's shapes exactly).
        """
        kind = self.kind
        # A step's two entries first (each kind is one of these branches only, so the order
        # changes nothing but the cost of the common case).
        if kind is EntryKind.OBSERVATION:
            shown = {
                "role": "tool",
                "name": self.tool,
                "content": self.content,
                "is_error": self.is_error,
            }
            if self.call_id is not None:
                shown["id"] = self.call_id
            return shown
        if kind is EntryKind.ACTION:
            if self.action_type is ActionKind.INVALID:
                return {"role": "assistant", "invalid": self.content}
            message = {"role": "assistant", "tool": self.tool, "args": self.args}
            if self.call_id is not None:
                message["id"] = self.call_id
            if self.content is not None:
                message["text"] = self.content
            return message
        if kind in (EntryKind.TASK, EntryKind.WRAP_UP, EntryKind.MESSAGE):
            return {"role": "user", "content": self.content}
        if kind is EntryKind.FINAL:
            return {"role": "assistant", "content": self.content}
        return None


def step_messages(actions: Sequence[Entry], observations: Sequence[Entry]) -> list[dict[str, Any]]:
    """A step of several calls as the model sees it: one assistant message holding every
    call (and the text the model gave beside them), then each call's observation in call
    order, whatever order they were recorded in."""
    calls = []
    for action in actions:
        call: dict[str, Any] = {} if action.call_id is None else {"id": action.call_id}
        call.update(name=action.tool, args=action.args)
        calls.append(call)
    message: dict[str, Any] = {"role": "assistant", "calls": calls}
    if actions[0].content is not None:
        message["text"] = actions[0].content
    order = {action.idempotency_key: n for n, action in enumerate(actions)}
    ranked = sorted(observations, key=lambda o: order.get(o.idempotency_key, len(order)))
    return [message, *(shown for o in ranked if (shown := o.message()) is not None)]


def transcript_of(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """The transcript a journal's entries make: what the loop showed the model, in order."""
    messages: list[dict[str, Any]] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        calls = _rows_of_step(entries, i, (EntryKind.ACTION,), entry.step)
        if calls - i > 1:  # a step of several calls: its actions, then their observations
            # (the step's waits, answers and start marks among them are not shown)
            done = _rows_of_step(entries, calls, _CALL_ROWS, entry.step)
            observed = [e for e in entries[calls:done] if e.kind is EntryKind.OBSERVATION]
            messages.extend(step_messages(entries[i:calls], observed))
            i = done
            continue
        message = entry.message()
        if message is not None:
            messages.append(message)
        i += 1
    return messages


# What follows the actions of a step of several calls, before its next step.
_CALL_ROWS = (EntryKind.OBSERVATION, EntryKind.WAIT, EntryKind.ANSWER, EntryKind.START)


def _rows_of_step(
    entries: Sequence[Entry], start: int, kinds: tuple[EntryKind, ...], step: int
) -> int:
    """Where the run of rows of `kinds` of `step` that begins at `start` ends."""
    end = start
    while end < len(entries) and entries[end].kind in kinds and entries[end].step == step:
        end += 1
    return end


@dataclass(frozen=True)
class Stop:
    """How a run ended."""

    reason: StopReason
    output: Any = None
    error: str | None = None
    wrapped_up: bool = False


class Journal(Protocol):
    """Where the loop records a run. Every `append` is durable before the loop goes on."""

    @property
    def run_id(self) -> str: ...

    def recorded(self) -> Sequence[Entry]:
        """Entries written before this process took the run over (empty for a new run)."""
        ...

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        """Record `entry`; with `stop`, end the run in the same transaction.

        In a step of several calls each observation is appended from its call's thread as
        the call ends; the loop never appends from two threads at once.
        """
        ...

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        """Record `entries` in ONE transaction (the calls of a step, before any runs)."""
        ...

    def finish(self, stop: Stop, counters: Counters) -> None:
        """End the run without a new entry (cancelled, out of time, model error)."""
        ...

    def cancel_requested(self) -> bool:
        """Whether somebody asked this run to stop (checked before each model call)."""
        ...

    def attempt(self, action: Entry) -> int:
        """Which attempt at the call of `action` this process would make: 2 or more when a
        process before it may have started the call, 1 when none can have (a call a person
        approved, that no process has taken up since)."""
        ...

    def wait(self, entries: Sequence[Entry], children: Sequence[ChildRun] = ()) -> bool:
        """Record `entries` (a step's calls not recorded yet, then its waits: one per call
        that needs an answer) and leave the run waiting for a person, its lease let go, in
        the same transaction.
        `children`: the child runs the step's sub-agent calls start, created in it too.
        False when a cancel came first: the run finished then."""
        ...

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        """The messages sent to the run that its journal does not hold yet, recorded now as
        `message` entries of `step` (in ONE transaction that also marks them delivered);
        empty, at no cost, when none was sent."""
        ...

    @property
    def parks_children(self) -> bool:
        """Whether a sub-agent's call starts a child run and parks this one until it ends
        (a durable journal), rather than running the child inline (in memory)."""
        ...

    def place(self) -> Place:
        """Where this run stands in its tree: its depth, what the runs below it spent."""
        ...

    def tree_stop(self) -> TreeStop | None:
        """Why this run must stop for a run above it (cancelled, or its budget spent), as
        last heard (every write of a child run reports its ancestors' spend)."""
        ...


@dataclass
class MemoryJournal:
    """The journal of `run_agent`: nothing survives the process, nothing is replayed."""

    run_id: str = field(default_factory=new_run_id)
    entries: list[Entry] = field(default_factory=list)
    stop: Stop | None = None
    # An inline child's (runner.core.tree_inline): how deep it is, and the runs above it,
    # nearest first, to which everything it spends is charged as it is spent.
    depth: int = 0
    above: tuple[Charged, ...] = ()
    _last: Counters = field(default_factory=Counters)

    parks_children = False
    # Nobody outside the process can ask it to stop: `cancel_requested` is always False.
    cancellable = False

    def recorded(self) -> Sequence[Entry]:
        return ()

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        self.entries.append(entry)
        self._charge(entry.counters)
        if stop is not None:
            self.stop = stop

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        self.entries.extend(entries)
        if entries:
            self._charge(entries[-1].counters)
        if stop is not None:
            self.stop = stop

    def finish(self, stop: Stop, counters: Counters) -> None:
        self._charge(counters)
        self.stop = stop

    def _charge(self, counters: Counters) -> None:
        if self.above:
            from runner.core.tree import Spend

            added = Spend.added(self._last, counters)
            for run in self.above:
                run.charge(added)
        self._last = counters

    def place(self) -> Place:
        from runner.core.tree import Place

        return Place(depth=self.depth)

    def tree_stop(self) -> TreeStop | None:
        if not self.above:
            return None
        from runner.core.tree import ancestors_stop

        return ancestors_stop([run.ancestor() for run in self.above])

    def cancel_requested(self) -> bool:
        return False

    def attempt(self, action: Entry) -> int:
        return 2

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        return ()  # nobody can send a message to a run in memory

    def wait(self, entries: Sequence[Entry], children: Sequence[ChildRun] = ()) -> bool:
        # No call of the step has run: in memory, as in a durable run, a step's calls wait
        # together for every answer they need.
        self.entries.extend(entries)
        if entries:
            self._charge(entries[-1].counters)
        asked = ", ".join(
            f"{entry.tool} needs a person's {entry.waits_for}"
            for entry in entries
            if entry.kind is EntryKind.WAIT
        )
        raise RunWaiting(
            f"run {self.run_id}: {asked}, and an in-memory run has nobody to ask: run the "
            "agent with a durable Runner",
            run_id=self.run_id,
            waits_for=("answer",),  # an in-memory run starts no child run to wait for
        )
