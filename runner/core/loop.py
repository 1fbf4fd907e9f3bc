"""The step machine: the one loop that every run, in memory or durable, goes through.

For step n: check cancellation and the deadline, take the model's action (from the journal
when a crash came after it was recorded, else from the model), record it, apply the stop
rules in seed 000's order (tokens, cost, final, repeats), wait for a person's answer if the
call needs one (`answer_for`), run the tool unless its outcome is recorded, record the
observation, then apply the error-streak and step-cap rules.
A step of several calls records them all in one write, runs them at once and records each
outcome as its call ends. This module knows nothing of storage: it talks to a `Journal`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from runner.core.actions import Action, ActionKind, parse_action
from runner.core.backoff import Backoff
from runner.core.budget_changes import applied, before_changes
from runner.core.budgets import WRAP_UP_REASONS, Budgets, StopReason
from runner.core.calls import CallTimedOut, Together, invoke
from runner.core.clock import SYSTEM, Clock
from runner.core.context import Context
from runner.core.faults import fault
from runner.core.journal import Counters, Entry, EntryKind, Journal, Stop, step_messages
from runner.core.result import AgentResult
from runner.core.resume_cursor import Recorded
from runner.core.spans import NO_SPANS, Spans
from runner.core.steps import (
    action_entry,
    action_of,
    call_entries,
    observation_entry,
    refused_entries,
)
from runner.core.tools import (
    KEY_PARAMETER,
    NOT_APPLIED,
    Tool,
    ToolCall,
    reset_current_call,
    set_current_call,
)
from runner.core.waiting import Answer, observation_of, wait_entry
from runner.errors import ModelFatal, ModelRetryable, ReplayMismatch, RunPaused, RunWaiting

Model = Callable[[list[dict[str, Any]]], Any]
Cancel = Callable[[], bool] | threading.Event

WRAP_UP_NOTE = (
    "Your {budget} budget is spent. Do not call any more tools: "
    'reply now with {{"type": "final", "content": ...}} holding your best answer.'
)
# A wrap-up call gets this long when the clock itself is what ran out.
WRAP_UP_SECONDS = 30.0


class _ModelFailed(Exception):
    pass


class _OutOfTime(Exception):
    pass


def drive(
    model: Model,
    tools: Mapping[str, Tool],
    task: str,
    budgets: Budgets,
    journal: Journal,
    *,
    deadline: float | None = None,
    cancel: Cancel | None = None,
    pause: threading.Event | None = None,
    clock: Clock = SYSTEM,
    context: Context | None = None,
    spans: Spans = NO_SPANS,
) -> AgentResult:
    """Run (or resume) one agent loop to its stop, recording everything in `journal`.

    `budgets` are the run's budgets now; a journal that records budget changes (a revival,
    an extension) is replayed from the budgets before them, each change applied where it
    was recorded. When `pause` is set the loop raises RunPaused before its next model call,
    leaving the run unfinished for a later resume (a worker shutting down gracefully).
    `deadline` is in seconds since the epoch on `clock`, which also paces the model's
    retries. `context` maps the transcript to what the model is sent; the journal and the
    result keep it whole.
    `spans` is told of each step, model call and tool call (tracing; see runner.spans).
    """
    loop = _Loop(model, tools, task, budgets, journal, deadline, cancel, clock)
    loop.pause = pause
    loop.context = context
    loop.spans = spans
    try:
        return loop.run()
    finally:
        loop.together.close()


class _Loop:
    def __init__(
        self,
        model: Model,
        tools: Mapping[str, Tool],
        task: str,
        budgets: Budgets,
        journal: Journal,
        deadline: float | None,
        cancel: Cancel | None,
        clock: Clock,
    ) -> None:
        self.model = model
        self.tools = tools
        self.task = task
        self.journal = journal
        self.deadline = deadline
        self.cancel = cancel
        self.clock = clock
        recorded = journal.recorded()
        # Each recorded step is replayed under the budgets it ran with.
        self.budgets = before_changes(budgets, recorded)
        self.replay = Recorded(recorded, self.change_budgets)
        self.transcript: list[dict[str, Any]] = []
        self.counters = Counters()
        self.calls: Counter[tuple[str, str]] = Counter()
        self.pause: threading.Event | None = None
        self.context: Context | None = None
        self.spans: Spans = NO_SPANS
        # Whether each tool takes an idempotency key, read once per run: inspecting a
        # signature costs more than the rest of an in-memory step.
        self.takes_key_by_tool: dict[str, bool] = {}
        self.together = Together(budgets.max_parallel_tools)  # threads for steps of several

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> AgentResult:
        if self.replay.take(0, (EntryKind.TASK,)) is None:
            self.journal.append(Entry(EntryKind.TASK, 0, self.counters, content=self.task))
        self.transcript.append({"role": "user", "content": self.task})
        step = 0
        while True:
            step += 1
            self.replay.changes()  # a change recorded before this step applies to it
            if step > self.budgets.max_steps:
                break
            with self.spans.step(step):
                stop = self.step(step)
            if stop is not None:
                self.replay.expect_end(step, stop)
                return self.result(stop)
        # Only reached with max_steps == 0 (or one lowered below the steps taken): a zero
        # cap takes zero steps, and makes no model call at all (not even a wrap-up).
        stop = Stop(StopReason.MAX_STEPS)
        self.replay.expect_end(step, stop)
        self.journal.finish(stop, self.counters)
        return self.result(stop)

    def change_budgets(self, entry: Entry) -> None:
        """A recorded revival or extension: the steps after it run under its budgets."""
        self.budgets = applied(self.budgets, entry)

    def step(self, step: int) -> Stop | None:
        """One step: the action (replayed or asked for), the stop rules, then the tools."""
        recorded = self.replay.take_action(step)
        if recorded:
            action = action_of(recorded)
        else:
            asked = self.next_action()
            if isinstance(asked, Stop):
                return asked
            action = asked
        self.count(step, action)
        reason = self.stop_rule(action)
        if reason is StopReason.FINAL:
            return self.answer(recorded, step, action)
        if reason is not None:
            refused = refused_entries(EntryKind.REFUSED, step, self.counters, action)
            return self.stop_after(recorded, refused, reason)
        if action.calls:
            return self.act_together(recorded, step, action)
        return self.act(recorded, step, action)

    def next_action(self) -> Action | Stop:
        """The model's next action, unless the run must stop before it is asked."""
        early = self.check_before_model()
        if early is not None:
            return self.stop_now(early)
        try:
            return parse_action(self.ask_model())
        except _OutOfTime:
            return self.stop_now(StopReason.TIME_BUDGET)
        except _ModelFailed as failure:
            return self.stop_now(StopReason.MODEL_ERROR, error=str(failure))

    def count(self, step: int, action: Action) -> None:
        """Charge the step and its usage, and count each call's signature for repeats."""
        c = self.counters
        self.counters = Counters(
            steps=step,
            tokens=c.tokens + action.tokens,
            cost=c.cost + action.cost,
            error_streak=c.error_streak,
        )
        if action.calls:
            self.calls.update(action.signatures)
        elif action.signature is not None:  # the common case, without a list
            self.calls[action.signature] += 1

    def stop_rule(self, action: Action) -> StopReason | None:
        """The stop rules before a tool runs, in seed 000's order."""
        b, c = self.budgets, self.counters
        if b.max_tokens is not None and c.tokens > b.max_tokens:
            return StopReason.TOKEN_BUDGET
        if b.max_cost is not None and c.cost > b.max_cost:
            return StopReason.COST_BUDGET
        if action.kind is ActionKind.FINAL:
            return StopReason.FINAL
        if b.max_repeats is None:
            return None
        if action.calls:
            repeated = any(self.calls[s] > b.max_repeats for s in action.signatures)
            return StopReason.REPEATED_CALL if repeated else None
        signature = action.signature
        if signature is None:
            return None
        return StopReason.REPEATED_CALL if self.calls[signature] > b.max_repeats else None

    def answer(self, recorded: Sequence[Entry], step: int, action: Action) -> Stop:
        """The model answered: record the answer and the run's end in one write."""
        entry = action_entry(EntryKind.FINAL, step, self.counters, action)
        stop = Stop(StopReason.FINAL, output=action.content)
        self.record(recorded, (entry,), stop)
        self.show(entry)
        return stop

    def act(self, recorded: Sequence[Entry], step: int, action: Action) -> Stop | None:
        """Record the call, run it (unless its outcome is recorded), record what it gave."""
        # A recorded call keeps the key it was made with (a fork's copied steps keep their
        # parent's): a pending call is settled under the key its tool really saw.
        key = (recorded[0].idempotency_key if recorded else None) or (
            f"{self.journal.run_id}-{step}"
        )
        entry = action_entry(EntryKind.ACTION, step, self.counters, action, key=key)
        self.record(recorded, (entry,), None)
        self.show(entry)

        answer = self.answer_for(entry)
        if isinstance(answer, Stop):
            return answer
        observed = self.replay.take(step, (EntryKind.OBSERVATION,))
        fresh = observed is None
        if observed is None:
            # A call a person approved is pending only if a process took it up since.
            pending = bool(recorded) and (answer is None or self.journal.attempt(entry) > 1)
            observed = self.observe(entry, action, pending=pending, answer=answer)
        self.counters = observed.counters
        reason = self.reason_after(observed)
        if fresh:
            # The stop (if any) is written with the observation: one commit for the step.
            self.journal.append(observed, self.stop_with(reason))
        self.show(observed)
        if reason is not None and not fresh and self.replay.changes():
            return None  # a recorded stop that a revival lifted
        return self.after(reason)

    def act_together(self, recorded: Sequence[Entry], step: int, action: Action) -> Stop | None:
        """Record every call in one write before any runs, run those whose outcome is not
        recorded at once (at most max_parallel_tools), and record each outcome as it ends."""
        calls = call_entries(EntryKind.ACTION, step, self.counters, action, self.journal.run_id)
        if recorded:  # the keys the calls were made with (a fork's keep their parent's)
            calls = [
                replace(call, idempotency_key=row.idempotency_key)
                for call, row in zip(calls, recorded, strict=True)
            ]
        self.record(recorded, calls, None)
        batch = _Batch(self, calls, self.replayed_outcomes(step, calls))
        done = {entry.idempotency_key for entry in batch.observed}
        jobs = [
            batch.job(call, pending=bool(recorded))
            for call in calls
            if call.idempotency_key not in done
        ]
        self.together.run(jobs)
        last = batch.observed[-1]  # the last recorded: the step's counters, its stop if any
        self.counters = last.counters
        self.transcript.extend(step_messages(calls, batch.observed))
        reason = self.reason_after(last)
        if reason is not None and not jobs and self.replay.changes():
            return None  # a recorded stop that a revival lifted
        return self.after(reason)

    def replayed_outcomes(self, step: int, calls: Sequence[Entry]) -> list[Entry]:
        """The observations a previous process recorded for the step's calls, in its order."""
        keys = {call.idempotency_key for call in calls}
        observed: list[Entry] = []
        while len(observed) < len(calls):
            entry = self.replay.take(step, (EntryKind.OBSERVATION,))
            if entry is None:
                break
            if entry.idempotency_key not in keys:
                raise ReplayMismatch(
                    f"step {step} has an observation (key {entry.idempotency_key}) for none "
                    "of its calls: the agent's budgets or code changed since the run started"
                )
            keys.discard(entry.idempotency_key)
            observed.append(entry)
        return observed

    def stop_with(self, reason: StopReason | None) -> Stop | None:
        """The stop to record with the step's last entry (none if a wrap-up comes first)."""
        return None if self.wraps_up(reason) else _stop_of(reason)

    def after(self, reason: StopReason | None) -> Stop | None:
        if reason is None:
            return None
        return self.wrap_up(reason) if self.wraps_up(reason) else Stop(reason)

    def reason_after(self, observed: Entry) -> StopReason | None:
        limit = self.budgets.max_consecutive_errors
        if limit is not None and observed.counters.error_streak > limit:
            return StopReason.TOOL_ERRORS
        if observed.step == self.budgets.max_steps:
            return StopReason.MAX_STEPS
        return None

    def wraps_up(self, reason: StopReason | None) -> bool:
        return self.budgets.wrap_up and reason in WRAP_UP_REASONS

    # -- the model ------------------------------------------------------------------------

    def check_before_model(self) -> StopReason | None:
        if self.pause is not None and self.pause.is_set():
            raise RunPaused(
                f"run {self.journal.run_id} paused before step {self.counters.steps + 1}"
            )
        if self.cancelled():
            return StopReason.CANCELLED
        if self.deadline is not None and self.clock.time() >= self.deadline:
            return StopReason.TIME_BUDGET
        return None

    def cancelled(self) -> bool:
        if isinstance(self.cancel, threading.Event):
            if self.cancel.is_set():
                return True
        elif self.cancel is not None and self.cancel():
            return True
        return self.journal.cancel_requested()

    def ask_model(self) -> Any:
        """Call the model, retrying exceptions with backoff; never past the deadline."""
        try:
            shown = self.shown()
        except Exception as exc:  # the same transcript would fail the same way again
            raise _ModelFailed(f"context: {_describe(exc)}") from None
        last: Exception | None = None
        backoff = Backoff(self.budgets.retry_backoff)
        for attempt in range(self.budgets.model_retries + 1):
            if attempt:
                pause = backoff.next()
                if isinstance(last, ModelRetryable) and last.retry_after is not None:
                    pause = max(pause, last.retry_after)  # the provider said when to return
                remaining = self.remaining()
                if remaining is not None and remaining <= pause:
                    raise _OutOfTime
                self.clock.sleep(pause)
            remaining = self.remaining()
            if remaining is not None and remaining <= 0:
                raise _OutOfTime
            try:
                with self.spans.model_call(self.counters.steps + 1) as call:
                    output = invoke(self.model, (shown,), {}, remaining)
                    call.returned(output)
                return output
            except CallTimedOut:
                raise _OutOfTime from None
            except ModelFatal as exc:
                raise _ModelFailed(_describe(exc)) from None
            except Exception as exc:
                last = exc
        raise _ModelFailed(_describe(last))

    def shown(self) -> list[dict[str, Any]]:
        """What the model is sent: the transcript, through the agent's context function."""
        return self.transcript if self.context is None else self.context(self.transcript)

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock.time()

    # -- people in the loop ---------------------------------------------------------------

    def answer_for(self, entry: Entry) -> Entry | Stop | None:
        """The person's answer this call needs before it runs; None if it needs none.

        A call that needs one and has none is journaled as waiting (`journal.wait`: the run
        lets its worker go in that commit) and the run stops here with RunWaiting, or with
        the Stop when a cancel came first.
        """
        wait = self.replay.take_if(entry.step, EntryKind.WAIT)
        if wait is None:
            tool = self.tools.get(entry.tool or "")
            if not self.replay.done or tool is None or entry.action_type is not ActionKind.TOOL:
                return None  # journaled already (the call went ahead), or no call to ask of
            asks = tool.asks(entry.args)
            if asks is None:
                return None
            wait = wait_entry(entry, asks, self.counters)
            if not self.journal.wait(wait):
                return Stop(StopReason.CANCELLED)
        answer = self.replay.take(entry.step, (EntryKind.ANSWER,))
        if answer is None:
            raise RunWaiting(
                f"run {self.journal.run_id} waits for a person's {wait.waits_for}: "
                f"{wait.content} (call {wait.idempotency_key})",
                run_id=self.journal.run_id,
            )
        return answer

    # -- tools ----------------------------------------------------------------------------

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
        c = self.counters
        streak = c.error_streak + 1 if is_error else 0
        counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
        return observation_entry(entry, counters, content, is_error, attempt)

    def outcome(self, entry: Entry, *, pending: bool) -> tuple[str, bool, int]:
        """The call's (content, is_error, attempt): run, or settled if a crash left it pending."""
        if pending and entry.tool in self.tools:
            return self.settle(entry, self.journal.attempt(entry))
        return (*self.call_tool(entry, 1), 1)

    def settle(self, entry: Entry, attempt: int) -> tuple[str, bool, int]:
        """A crash left this call's outcome unknown: each tool says how to settle that."""
        assert entry.tool is not None and entry.idempotency_key is not None
        tool = self.tools[entry.tool]
        if tool.reconcile is not None:
            try:
                outcome = tool.reconcile(entry.idempotency_key, dict(entry.args or {}))
            except Exception as exc:
                return (
                    f"OutcomeUnknown: {entry.tool} was interrupted by a crash and its "
                    f"reconcile hook failed ({_describe(exc)}); it may or may not have "
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
        limit = tool.timeout if tool.timeout is not None else self.budgets.tool_timeout
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
            return _describe(exc), True
        finally:
            reset_current_call(token)

    # -- recording and stopping -----------------------------------------------------------

    def record(
        self, recorded: Sequence[Entry], entries: Sequence[Entry], stop: Stop | None
    ) -> None:
        if not recorded:
            if len(entries) == 1:
                self.journal.append(entries[0], stop)
            else:
                self.journal.append_many(entries, stop)
        elif recorded[0].kind != entries[0].kind:
            # The same rows either way: the action was rebuilt from the recorded ones.
            raise ReplayMismatch(
                f"step {entries[0].step} was recorded as {recorded[0].kind} but now decides "
                f"{entries[0].kind}: the agent's budgets or code changed since the run started",
                step=entries[0].step,
                recorded=recorded[0],
                now=_decision(entries[0], stop),
            )

    def show(self, entry: Entry) -> None:
        message = entry.message()
        if message is not None:
            self.transcript.append(message)

    def stop_after(
        self, recorded: Sequence[Entry], entries: Sequence[Entry], reason: StopReason
    ) -> Stop | None:
        """Record a refused action and stop for `reason`, after a wrap-up if one is wanted.

        A refusal replayed from the journal stays a refusal; if a revival was recorded after
        it, the run went on to the next step (the refused action is never run)."""
        if recorded:
            self.record(recorded, entries, Stop(reason))  # a check only: it is recorded
            if self.replay.changes():
                return None
            return self.wrap_up(reason) if self.wraps_up(reason) else Stop(reason)
        if self.wraps_up(reason):
            self.record(recorded, entries, None)
            return self.wrap_up(reason)
        stop = Stop(reason)
        self.record(recorded, entries, stop)
        return stop

    def stop_now(self, reason: StopReason, *, error: str | None = None) -> Stop:
        """Stop before asking the model (cancelled, out of time, the model failing)."""
        if self.wraps_up(reason):
            return self.wrap_up(reason)
        stop = Stop(reason, error=error)
        self.journal.finish(stop, self.counters)
        return stop

    def wrap_up(self, reason: StopReason) -> Stop:
        """One last model call, told that the budget is spent and it must answer now."""
        step = self.counters.steps
        note = self.replay.take(step, (EntryKind.WRAP_UP,))
        if note is None:
            note = Entry(
                EntryKind.WRAP_UP, step, self.counters, content=WRAP_UP_NOTE.format(budget=reason)
            )
            self.journal.append(note)
        self.show(note)
        answer = self.replay.take(step, (EntryKind.FINAL, EntryKind.REFUSED))
        if answer is None:
            try:
                limit = WRAP_UP_SECONDS if reason is StopReason.TIME_BUDGET else self.remaining()
                if limit is not None and limit <= 0:
                    limit = WRAP_UP_SECONDS
                with self.spans.model_call(step) as call:
                    output = invoke(self.model, (self.shown(),), {}, limit)
                    call.returned(output)
                action = parse_action(output)
            except Exception as exc:  # the run is over either way: keep the budget's reason
                action = Action(ActionKind.INVALID, error=_describe(exc))
            c = self.counters
            counters = replace(c, tokens=c.tokens + action.tokens, cost=c.cost + action.cost)
            kind = EntryKind.FINAL if action.kind is ActionKind.FINAL else EntryKind.REFUSED
            answer = action_entry(kind, step, counters, action)
            wrapped = Stop(reason, output=action.content, wrapped_up=True)
            self.journal.append(answer, wrapped if kind is EntryKind.FINAL else Stop(reason))
        self.counters = answer.counters
        if answer.kind is EntryKind.FINAL:
            self.show(answer)
            return Stop(reason, output=answer.content, wrapped_up=True)
        return Stop(reason)

    def result(self, stop: Stop) -> AgentResult:
        c = self.counters
        steps = self.budgets.max_steps if stop.reason is StopReason.MAX_STEPS else c.steps
        return AgentResult(
            stop_reason=stop.reason,
            output=stop.output,
            steps=steps,
            transcript=self.transcript,
            tokens=c.tokens,
            cost=c.cost,
            error=stop.error,
            wrapped_up=stop.wrapped_up,
            run_id=self.journal.run_id,
        )


class _Batch:
    """The outcomes of one step's calls, recorded as each call ends (on its own thread).

    Recording is one call at a time, so the step's counters and its stop are decided in the
    order the journal keeps: the error streak grows only if every call so far failed (a
    step is a failed step only when all its calls failed), and the last call to end writes
    the step's stop with its own observation, as a single-call step does.
    """

    def __init__(self, loop: _Loop, calls: Sequence[Entry], observed: list[Entry]) -> None:
        self.loop = loop
        self.calls = calls
        self.observed = observed  # replayed first, then in the order they were recorded
        self.lock = threading.Lock()

    def job(self, call: Entry, *, pending: bool) -> Callable[[], None]:
        def run() -> None:
            tool = self.loop.tools.get(call.tool or "")
            if tool is not None and tool.asks(call.args) is not None:
                # A person's answer is asked of a call alone: never run it unasked here.
                self.record(call, *_asked_alone(call.tool))
                return
            self.record(call, *self.loop.outcome(call, pending=pending))

        return run

    def record(self, call: Entry, content: str, is_error: bool, attempt: int) -> None:
        loop = self.loop
        with self.lock:
            c = loop.counters
            failed = is_error and all(entry.is_error for entry in self.observed)
            streak = c.error_streak + 1 if failed else 0
            counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
            entry = observation_entry(call, counters, content, is_error, attempt)
            last = len(self.observed) + 1 == len(self.calls)
            loop.journal.append(entry, loop.stop_with(loop.reason_after(entry)) if last else None)
            self.observed.append(entry)


def _decision(entry: Entry, stop: Stop | None) -> str:
    """What the loop now decides at a step, in words (for a ReplayMismatch)."""
    if entry.kind is EntryKind.FINAL:
        return "answers"
    if entry.kind is EntryKind.REFUSED:
        return f"refuses the action ({stop.reason})" if stop is not None else "refuses the action"
    return f"calls {entry.tool}" if entry.action_type is ActionKind.TOOL else "records the action"


def _asked_alone(tool: str | None) -> tuple[str, bool, int]:
    return (
        f"NeedsAnswer: {tool} needs a person's answer before it runs, and asks it only as the "
        "one call of its step: call it again on its own",
        True,
        1,
    )


def _stop_of(reason: StopReason | None) -> Stop | None:
    return None if reason is None else Stop(reason)


def _describe(exc: BaseException | None) -> str:
    return "unknown error" if exc is None else f"{type(exc).__name__}: {exc}"
