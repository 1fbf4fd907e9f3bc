"""Replay: today's agent code against a recorded run, with no model called and no tool run.

The loop drives the agent over a journal that holds the run's entries and refuses every
write: each model output and each observation comes from the record, as on a resume. The
loop's own replay check (ReplayMismatch) finds a step the code now decides differently (a
budget that stops earlier or later, a stop rule that changed); beside it, each recorded
step is checked against what the agent would do with it today: the tool it called still
exists and takes its arguments, and the agent's context function (and a model adapter's
request) still accepts the transcript the model was shown. The first step where any of
these part is reported; a run that agrees to its end is a regression test passed.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from runner.core.actions import ActionKind
from runner.core.agent import Agent
from runner.core.budgets import Budgets
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.loop import drive
from runner.core.stop_reasons import StopReason
from runner.core.tools import KEY_PARAMETER, Tool
from runner.core.tree import ChildRun, Place, TreeStop
from runner.errors import ReplayMismatch, RunnerError, RunWaiting
from runner.models.adapter import Adapter
from runner.store.rows import RunRow

# Stops the loop decides from recorded entries: replaying must reach them again. Others
# come from outside the code (the clock, a cancel, the model's errors, the workers).
_DECIDED_BY_CODE = frozenset(
    {
        StopReason.FINAL,
        StopReason.MAX_STEPS,
        StopReason.TOKEN_BUDGET,
        StopReason.COST_BUDGET,
        StopReason.REPEATED_CALL,
        StopReason.TOOL_ERRORS,
    }
)
_CUT = 60


@dataclass(frozen=True)
class Replay:
    """What replaying a run against an agent found.

    `agrees` when the agent, given the recorded model outputs and observations, takes every
    recorded step and the recorded stop again. Otherwise `step` is the first step where it
    would act differently, `recorded` what the run did there ("called add(...)": read after
    "the run") and `now` what the agent would do instead ("has no tool add: ...": read after
    "the agent"). `note` says what the replay could not check.
    """

    run_id: str
    steps: int
    stop_reason: StopReason | None
    agrees: bool
    step: int | None = None
    recorded: str | None = None
    now: str | None = None
    note: str | None = None


class _Beyond(RunnerError):
    """The loop went past the record: it would ask the model, run a tool or write."""


class _Stopped(RunnerError):
    def __init__(self, stop: Stop) -> None:
        super().__init__(str(stop.reason))
        self.stop = stop


@dataclass
class _RecordOnly:
    """A journal holding one run's entries that refuses every write."""

    run_id: str
    entries: Sequence[Entry]

    def recorded(self) -> Sequence[Entry]:
        return self.entries

    def append(self, entry: Entry, stop: Stop | None = None) -> None:
        raise _Beyond(f"would record {entry.kind}")

    def append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        raise _Beyond(f"would record {entries[0].kind}")

    def finish(self, stop: Stop, counters: Counters) -> None:
        raise _Stopped(stop)

    def cancel_requested(self) -> bool:
        raise _Beyond("would ask the model")  # checked before every model call

    def attempt(self, action: Entry) -> int:
        # Asked too after a step's answers (a person's, or a child run's end) whether a
        # process took the step up since, so 1: a replay takes nothing up. A call with no
        # recorded outcome still goes beyond the record: its tool (or reconcile hook) is
        # guarded, and settling it would record an observation.
        return 1

    def wait(self, entries: Sequence[Entry], children: Sequence[ChildRun] = ()) -> bool:
        raise _Beyond("would wait for a person's answer")

    # A recorded sub-agent's call is a wait with its answer (the child's end): replayed.
    parks_children = True

    def place(self) -> Place:
        return Place()

    def tree_stop(self) -> TreeStop | None:
        return None

    def messages(self, step: int, counters: Counters) -> Sequence[Entry]:
        return ()  # past the record: the model would be asked next, and that says so


def replay_run(run: RunRow, journal: Sequence[Entry], agent: Agent, budgets: Budgets) -> Replay:
    """Replay `run` (its `journal`) against `agent` under `budgets`; see Replay."""
    steps = max((entry.step for entry in journal), default=0)
    found = _loop_difference(run, journal, agent, budgets)
    first = _step_difference(journal, agent)
    if first is not None and (found is None or first[0] < found[0]):
        found = first
    base = Replay(run.id, steps, run.stop_reason, agrees=True)
    if found is not None:
        step, recorded, now = found
        return replace(base, agrees=False, step=step, recorded=recorded, now=now)
    if run.stop_reason is not None and run.stop_reason not in _DECIDED_BY_CODE:
        note = f"the run stopped with {run.stop_reason}, which no recorded step decides"
        return replace(base, note=note)
    if run.stop_reason is None:
        return replace(base, note=f"the run has not stopped ({run.status}): checked so far")
    return base


def _loop_difference(
    run: RunRow, journal: Sequence[Entry], agent: Agent, budgets: Budgets
) -> tuple[int, str, str] | None:
    """Where the loop itself parts from the record, if anywhere."""
    tools = {name: _guarded(tool) for name, tool in agent.tools.items()}
    last = max((entry.step for entry in journal), default=0)
    try:
        # A framework's agent (runner.integrations) replays its own loop against the record.
        loop = agent.loop or drive
        result = loop(_no_model, tools, run.task, budgets, _RecordOnly(run.id, journal))
    except ReplayMismatch as exc:
        step = exc.step if exc.step is not None else last
        return step, _recorded(exc.recorded), exc.now or str(exc)
    except _Stopped as stopped:
        if stopped.stop.reason != run.stop_reason:
            return last, _how_stopped(run), f"stops with {stopped.stop.reason}"
        return None
    except RunWaiting:
        return None  # the record ends at a wait still unanswered: it agrees so far
    except _Beyond:
        if run.stop_reason in _DECIDED_BY_CODE:
            return last, _how_stopped(run), f"goes on to step {last + 1}"
        return None
    if result.stop_reason != run.stop_reason:
        return last, _how_stopped(run), f"stops with {result.stop_reason}"
    return None


def _step_difference(journal: Sequence[Entry], agent: Agent) -> tuple[int, str, str] | None:
    """The first recorded step the agent's code would now handle differently."""
    transcript: list[dict[str, Any]] = []
    for entry in journal:
        if entry.kind in (EntryKind.ACTION, EntryKind.FINAL, EntryKind.REFUSED):
            problem = _shown_problem(agent, transcript)
            if problem is not None:
                return entry.step, "asked the model with the transcript so far", problem
        if entry.kind is EntryKind.ACTION and entry.action_type is ActionKind.TOOL:
            problem = _call_problem(agent, entry)
            if problem is not None:
                return entry.step, _recorded(entry), problem
        message = entry.message()
        if message is not None:
            transcript.append(message)
    return None


def _shown_problem(agent: Agent, transcript: list[dict[str, Any]]) -> str | None:
    """Why the agent could not ask its model for the next step of `transcript` now."""
    try:
        shown = agent.context(list(transcript)) if agent.context is not None else transcript
    except Exception as exc:
        return (
            f"has a context function that raises {_error(exc)}: the run would stop with model_error"
        )
    if isinstance(agent.model, Adapter):
        try:
            agent.model.request(list(shown))
        except Exception as exc:
            return (
                f"has a model adapter that cannot build the request ({_error(exc)}): the run "
                "would stop with model_error"
            )
    return None


def _call_problem(agent: Agent, action: Entry) -> str | None:
    """Why the recorded call would not reach its tool the same way now."""
    name = action.tool or ""
    tool = agent.tools.get(name)
    if tool is None:
        return f"has no tool {name}: it would observe LookupError: unknown tool {name}"
    args = dict(action.args or {})
    if tool.takes_key:
        if KEY_PARAMETER in args:
            return f"would call {name}, which takes the {KEY_PARAMETER} the call set: ValueError"
        args[KEY_PARAMETER] = action.idempotency_key or ""
    try:
        signature = inspect.signature(tool.fn)
    except (TypeError, ValueError):
        return None  # a callable with no signature to read: nothing to compare
    try:
        signature.bind(**args)
    except TypeError as exc:
        return f"would call {name}, which no longer takes these arguments ({exc}): TypeError"
    return None


def _guarded(tool: Tool) -> Tool:
    """`tool` with the same declarations, whose function and reconcile hook never run."""

    @functools.wraps(tool.fn)
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise _Beyond("would run a tool")

    reconcile: Callable[[str, dict[str, Any]], Any] | None = None
    if tool.reconcile is not None:
        reconcile = refuse
    return replace(tool, fn=refuse, reconcile=reconcile)


def _no_model(transcript: list[dict[str, Any]]) -> NoReturn:
    raise _Beyond("would ask the model")


def _how_stopped(run: RunRow) -> str:
    if run.stop_reason is None:
        return f"went on (the run is {run.status})"
    return f"stopped with {run.stop_reason}"


def _recorded(entry: Entry | None) -> str:
    """What the run did, according to one of its entries."""
    if entry is None:
        return "the journal ended"
    if entry.kind is EntryKind.ACTION:
        if entry.action_type is ActionKind.TOOL:
            return f"called {entry.tool}({_cut(json.dumps(entry.args, sort_keys=True))})"
        return "gave malformed output"
    if entry.kind is EntryKind.OBSERVATION:
        return f"observed {entry.tool}: {_cut(str(entry.content))}"
    if entry.kind is EntryKind.FINAL:
        return f"answered {_cut(str(entry.content))}"
    if entry.kind is EntryKind.REFUSED:
        return "had its action refused by a stop rule"
    if entry.kind is EntryKind.WRAP_UP:
        return "asked the model for a last answer (wrap-up)"
    if entry.kind is EntryKind.TASK:
        return "started"
    return str(entry.content)


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CUT else text[: _CUT - 3] + "..."


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
