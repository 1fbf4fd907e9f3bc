"""Running a step's tool calls: one call or several at once, each under its time limit, and
settling a call whose outcome a crash left unknown (the tool's reconcile hook, a retry-safe
rerun, or an OutcomeUnknown observation)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from runner.core.actions import Action, ActionKind
from runner.core.calls import CallTimedOut, Together, described, invoke
from runner.core.faults import fault
from runner.core.journal import Counters, Entry, Journal
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
from runner.core.waiting import Answer, observation_of

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
        # Whether each tool takes an idempotency key, read once per run: inspecting a
        # signature costs more than the rest of an in-memory step.
        self.takes_key_by_tool: dict[str, bool] = {}
        self.together = Together(max_parallel)  # threads for steps of several calls

    def close(self) -> None:
        self.together.close()

    def observe(
        self, entry: Entry, action: Action, *, pending: bool, answer: Entry | None = None
    ) -> Entry:
        """Run the tool (or settle a call a crash left pending): the observation to record.

        An answered call runs only if it was approved; a denial or a reply is the observation.
        """
        ruled = (
            None if answer is None else observation_of(Answer(str(answer.answer)), answer.content)
        )
        if action.kind is ActionKind.INVALID:
            content, is_error, attempt = f"InvalidAction: {action.error}", True, 1
        elif ruled is not None:
            (content, is_error), attempt = ruled, 1
        else:
            if answer is not None and not pending:
                fault("before_approved_call")
            content, is_error, attempt = self.outcome(entry, pending=pending)
        c = self.rules.counters
        streak = c.error_streak + 1 if is_error else 0
        counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
        return observation_entry(entry, counters, content, is_error, attempt)

    def run_together(self, calls: Sequence[Entry], observed: list[Entry], *, pending: bool) -> int:
        """Run at once (at most max_parallel_tools) the calls with no outcome in `observed`,
        recording each outcome as it ends and appending it to `observed`: how many ran."""
        batch = _Batch(self, calls, observed)
        done = {entry.idempotency_key for entry in observed}
        jobs = [
            batch.job(call, pending=pending) for call in calls if call.idempotency_key not in done
        ]
        self.together.run(jobs)
        return len(jobs)

    def outcome(self, entry: Entry, *, pending: bool) -> Outcome:
        """The call's (content, is_error, attempt): run, or settled if a crash left it pending."""
        if pending and entry.tool in self.tools:
            return self.settle(entry, self.journal.attempt(entry))
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
                    f"OutcomeUnknown: {entry.tool} was interrupted by a crash and its "
                    f"reconcile hook failed ({described(exc)}); it may or may not have "
                    "taken effect",
                    True,
                    attempt,
                )
            if outcome is not NOT_APPLIED:
                return str(outcome), False, attempt
            return (*self.call_tool(entry, attempt), attempt)
        if tool.retry_safe:
            return (*self.call_tool(entry, attempt), attempt)
        return (
            f"OutcomeUnknown: {entry.tool} was interrupted by a crash (key "
            f"{entry.idempotency_key}); it may or may not have taken effect. Check before "
            "calling it again.",
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
        takes_key = self.takes_key_by_tool.get(name)
        if takes_key is None:
            takes_key = self.takes_key_by_tool[name] = tool.takes_key
        if takes_key:
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
        token = set_current_call(ToolCall(self.journal.run_id, entry.step, attempt, key))
        try:
            with self.spans.tool_call(entry.step, name, key, attempt):
                observation = str(invoke(tool.fn, (), kwargs, limit))
            fault("after_tool_return")
            return observation, False
        except CallTimedOut:
            if by_deadline:
                return f"TimeoutError: {name} was still running at the run's deadline", True
            return f"TimeoutError: {name} took longer than {limit:g}s", True
        except Exception as exc:
            return described(exc), True
        finally:
            reset_current_call(token)


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
        self.lock = threading.Lock()

    def job(self, call: Entry, *, pending: bool) -> Callable[[], None]:
        def run() -> None:
            tool = self.runs.tools.get(call.tool or "")
            if tool is not None and tool.asks(call.args) is not None:
                # A person's answer is asked of a call alone: never run it unasked here.
                self.record(call, *_asked_alone(call.tool))
                return
            self.record(call, *self.runs.outcome(call, pending=pending))

        return run

    def record(self, call: Entry, content: str, is_error: bool, attempt: int) -> None:
        rules = self.runs.rules
        with self.lock:
            c = rules.counters
            failed = is_error and all(entry.is_error for entry in self.observed)
            streak = c.error_streak + 1 if failed else 0
            counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
            entry = observation_entry(call, counters, content, is_error, attempt)
            last = len(self.observed) + 1 == len(self.calls)
            stop = rules.stop_with(rules.after_tools(entry)) if last else None
            self.runs.journal.append(entry, stop)
            self.observed.append(entry)


def _asked_alone(tool: str | None) -> Outcome:
    return (
        f"NeedsAnswer: {tool} needs a person's answer before it runs, and asks it only as the "
        "one call of its step: call it again on its own",
        True,
        1,
    )
