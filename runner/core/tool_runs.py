"""Running a step's tool calls: one call or several at once, each under its time limit, and
settling a call whose outcome a crash left unknown (the tool's reconcile hook, a retry-safe
rerun, or an OutcomeUnknown observation)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runner.core.actions import Action, ActionKind
from runner.core.calls import CallTimedOut, Together, described, invoke
from runner.core.counters import Counters
from runner.core.faults import fault
from runner.core.interrupts import CallInterrupted
from runner.core.journal import Entry, EntryKind, Journal
from runner.core.spans import Spans
from runner.core.steps import observation_entry
from runner.core.stop_rules import StopRules
from runner.core.tools import (
    KEY_PARAMETER,
    NOT_APPLIED,
    Tool,
    ToolCall,
    reset_current_call,
    set_current_call,
)
from runner.core.tree_inline import InlineParent
from runner.core.waiting import Answer, observation_of
from runner.core.watching import Watch
from runner.errors import RunPaused

Outcome = tuple[str, bool, int]  # (content, is_error, attempt)


class ToolRuns:
    """One run's tool calls: run, timed, settled after a crash, several at once."""

    def __init__(
        self,
        tools: Mapping[str, Tool],
        journal: Journal,
        rules: StopRules,
        remaining: Callable[[], float | None],
        spans: Spans,
        max_parallel: int,
    ) -> None:
        self.tools = tools
        self.journal = journal
        self.rules = rules  # the budgets the calls run under, the counters they update
        self.remaining = remaining  # seconds left before the run's deadline
        self.spans = spans
        self.together = Together(max_parallel)  # threads for steps of several calls
        # Journal writes from the calls' threads (start marks, outcomes), one at a time.
        self.writing = threading.Lock()
        # In memory: the run a sub-agent's child runs under, inline (runner.core.tree_inline).
        self.parent: InlineParent | None = None
        # Why a call in flight must be given up ("cancelled", "paused"), asked while an
        # interruptible tool's call runs: the model call's own check.
        self.stop_requested: Watch | None = None

    def close(self) -> None:
        self.together.close()

    def observe(
        self,
        entry: Entry,
        action: Action,
        *,
        pending: bool,
        answer: Entry | None = None,
        started: bool = False,
    ) -> Entry:
        """Run the tool (or settle a call a crash left pending): the observation to record.

        An answered call runs only if it was approved; a denial or a reply is the observation.
        `started`: the journal holds the call's start mark (a `mark_start` tool's).
        """
        if action.kind is ActionKind.INVALID:
            content, is_error, attempt = f"InvalidAction: {action.error}", True, 1
        else:
            content, is_error, attempt = self.answered(entry, answer, pending, started)
        c = self.rules.counters
        streak = c.error_streak + 1 if is_error else 0
        counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
        return observation_entry(entry, counters, content, is_error, attempt)

    def answered(self, entry: Entry, answer: Entry | None, pending: bool, started: bool) -> Outcome:
        """The outcome of a call after its answer, if it needed one: a denial or a reply is
        the outcome; an approved call (or one that needed no answer) runs."""
        if answer is not None and answer.answer == Answer.ENDED:
            # The child run's end, delivered by the runner: its answer or why it stopped.
            return (str(answer.content or ""), answer.is_error, 1)
        if answer is not None:
            ruled = observation_of(Answer(str(answer.answer)), answer.content)
            if ruled is not None:
                return (*ruled, 1)
            if not pending:
                fault("before_approved_call")
        return self.outcome(entry, pending=pending, started=started)

    def run_together(
        self,
        calls: Sequence[Entry],
        observed: list[Entry],
        *,
        pending: bool,
        answers: Mapping[str | None, Entry],
        started: set[str | None],
    ) -> int:
        """Run at once (at most max_parallel_tools) the calls with no outcome in `observed`,
        each after its answer (`answers`, by key), recording each outcome as it ends and
        appending it to `observed`: how many ran. `started`: the keys of the calls whose
        start marks the journal holds."""
        batch = _Batch(self, calls, observed)
        done = {entry.idempotency_key for entry in observed}
        jobs = [
            batch.job(call, pending, answers.get(key), key in started)
            for call in calls
            if (key := call.idempotency_key) not in done
        ]
        self.together.run(jobs)
        return len(jobs)

    def outcome(self, entry: Entry, *, pending: bool, started: bool = False) -> Outcome:
        """The call's (content, is_error, attempt): run, or settled if a crash left it pending.

        A pending call of a `mark_start` tool without its start mark never started (the mark
        is committed before every call of it): it runs, as a later attempt."""
        tool = self.tools.get(entry.tool or "")
        if pending and tool is not None:
            attempt = self.journal.attempt(entry)
            if tool.mark_start and not started:
                return (*self.call_tool(entry, attempt), attempt)
            return self.settle(entry, attempt)
        return (*self.call_tool(entry, 1), 1)

    def settle(self, entry: Entry, attempt: int) -> Outcome:
        """A crash left this call's outcome unknown: each tool says how to settle that."""
        assert entry.tool is not None and entry.idempotency_key is not None
        tool = self.tools[entry.tool]
        if tool.reconcile is not None:
            try:
                outcome = tool.reconcile(entry.idempotency_key, dict(entry.args or {}))
            except Exception as exc:
                return (
                    f"OutcomeUnknown: {entry.tool} was interrupted before its outcome was "
                    f"recorded and its reconcile hook failed ({described(exc)}); it may or "
                    "may not have taken effect",
                    True,
                    attempt,
                )
            if outcome is not NOT_APPLIED:
                return str(outcome), False, attempt
            return (*self.call_tool(entry, attempt), attempt)
        if tool.retry_safe:
            return (*self.call_tool(entry, attempt), attempt)
        # Interrupted: its process died (a crash, a kill) or gave the run back (Ctrl-C) while
        # the call ran or was about to, before its outcome was recorded. Which, and how far
        # the call got, no one can tell here.
        return (
            f"OutcomeUnknown: {entry.tool} was interrupted before its outcome was recorded "
            f"(key {entry.idempotency_key}); it may or may not have taken effect. Check "
            "before calling it again.",
            True,
            attempt,
        )

    def call_tool(self, entry: Entry, attempt: int) -> tuple[str, bool]:
        """Call the tool once, under its time limit and the run's deadline: (content, is_error)."""
        name, key = entry.tool, entry.idempotency_key
        assert name is not None and key is not None
        tool = self.tools.get(name)
        if tool is None:
            return f"LookupError: unknown tool {name}", True
        kwargs = dict(entry.args or {})
        if tool.sub_agent is not None:
            return self.call_sub_agent(tool, entry, kwargs)
        if tool.takes_key:  # read from its signature once per tool, not per run
            if KEY_PARAMETER in kwargs:
                return f"ValueError: {KEY_PARAMETER} is set by the runner, not the model", True
            kwargs[KEY_PARAMETER] = key
        limit = tool.timeout if tool.timeout is not None else self.rules.budgets.tool_timeout
        remaining = self.remaining()
        by_deadline = remaining is not None and (limit is None or remaining < limit)
        if by_deadline:
            limit = remaining
        if limit is not None and limit <= 0:
            return f"TimeoutError: no time left in the run's budget to call {name}", True
        if tool.mark_start and not self.mark_start(entry, attempt):
            return "Interrupted: the run was given back before the call started", True
        token = set_current_call(ToolCall(self.journal.run_id, entry.step, attempt, key))
        watch = self.stop_requested if tool.interruptible else None
        try:
            with self.spans.tool_call(entry.step, name, key, attempt):
                observation = str(invoke(tool.fn, (), kwargs, limit, watch=watch))
            fault("after_tool_return")
            return observation, False
        except CallInterrupted as exc:
            if exc.reason == "paused":
                # Left pending, as a crash would leave it: the resume settles it.
                raise RunPaused(
                    f"run {self.journal.run_id} paused during its {name} call"
                ) from None
            return (
                f"Cancelled: the run was cancelled while {name} ran (key {key}); the call "
                "was given up and may or may not have taken effect",
                True,
            )
        except CallTimedOut:
            if by_deadline:
                return f"TimeoutError: {name} was still running at the run's deadline", True
            return f"TimeoutError: {name} took longer than {limit:g}s", True
        except Exception as exc:
            return described(exc), True
        finally:
            reset_current_call(token)

    def call_sub_agent(self, tool: Tool, entry: Entry, kwargs: dict[str, Any]) -> tuple[str, bool]:
        """A sub-agent's call that starts no child run: in memory, the child runs inline
        here, charged to this run; a call without a task is an error the model is shown."""
        extra = sorted(set(kwargs) - {"task"})
        if extra or not isinstance(kwargs.get("task"), str) or not kwargs["task"].strip():
            return (
                f"TypeError: {entry.tool} takes one argument, task (text)"
                + (f", not {', '.join(extra)}" if extra else ""),
                True,
            )
        with self.spans.tool_call(entry.step, entry.tool or "", entry.idempotency_key or "", 1):
            # The tool's SubAgent (runner.core.agent) drives the child's loop, inline.
            content, is_error = tool.sub_agent.run(kwargs["task"], self.parent)
            return content, is_error

    def mark_start(self, entry: Entry, attempt: int) -> bool:
        """Journal that the call is about to start (committed before it does): False, and
        nothing written, once the step was abandoned (Ctrl-C): the call must not start."""
        mark = Entry(
            EntryKind.START,
            entry.step,
            self.rules.counters,
            tool=entry.tool,
            idempotency_key=entry.idempotency_key,
            attempt=attempt,
        )
        with self.writing:
            if self.together.abandoned.is_set():
                return False
            self.journal.append(mark)
        return True


class _Batch:
    """The outcomes of one step's calls, recorded as each call ends (on its own thread).

    Recording is one call at a time, so the step's counters and its stop are decided in the
    order the journal keeps: the error streak grows only if every call so far failed (a
    step is a failed step only when all its calls failed), and the last call to end writes
    the step's stop with its own observation, as a single-call step does.
    """

    def __init__(self, runs: ToolRuns, calls: Sequence[Entry], observed: list[Entry]) -> None:
        self.runs = runs
        self.calls = calls
        self.observed = observed  # replayed first, then in the order they were recorded

    def job(
        self, call: Entry, pending: bool, answer: Entry | None, started: bool
    ) -> Callable[[], None]:
        def run() -> None:
            self.record(call, *self.runs.answered(call, answer, pending, started))

        return run

    def record(self, call: Entry, content: str, is_error: bool, attempt: int) -> None:
        rules = self.runs.rules
        with self.runs.writing:
            if self.runs.together.abandoned.is_set():
                # Ctrl-C gave the run back while this call ran: its outcome is dropped, and
                # the call is settled on resume as any call interrupted in flight.
                return
            c = rules.counters
            failed = is_error and all(entry.is_error for entry in self.observed)
            streak = c.error_streak + 1 if failed else 0
            counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
            entry = observation_entry(call, counters, content, is_error, attempt)
            last = len(self.observed) + 1 == len(self.calls)
            stop = rules.stop_with(rules.after_tools(entry)) if last else None
            self.runs.journal.append(entry, stop)
            self.observed.append(entry)
