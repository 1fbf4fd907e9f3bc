"""The step machine: the one loop that every run, in memory or durable, goes through.

For step n: check cancellation and the deadline, take the model's action (from the journal
when a crash came after it was recorded, else from the model), record it, apply the stop
rules in seed 000's order (tokens, cost, final, repeats), wait for people's answers if the
step's calls need some (`answers_for`), run the tools unless their outcomes are recorded,
record the observations, then apply the error-streak and step-cap rules.
A step of several calls records them all in one write, waits for every answer they need
(the waits in one write), runs them at once and records each outcome as its call ends.
This module knows nothing of storage: it talks to a `Journal`.

The loop is the order of a step and what it journals; the model call (`model_call`), the
tool calls (`tool_runs`) and the stop rules with their counters (`stop_rules`) are each a
module of their own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from runner.core.actions import Action, ActionKind, parse_action
from runner.core.budget_changes import before_changes
from runner.core.budgets import Budgets
from runner.core.calls import is_async
from runner.core.clock import SYSTEM, Clock
from runner.core.compacting import Compacting
from runner.core.compaction import Compacted, Compaction
from runner.core.context import Context
from runner.core.deltas import DeltaSink
from runner.core.journal import Entry, EntryKind, Journal, Stop, step_messages
from runner.core.limits import (
    NO_LIMITS,
    Draw,
    Limits,
    Reservation,
    first_call_tokens,
    limit_of,
    limit_wait_entry,
    max_tokens_of,
)
from runner.core.listings import listings_change, listings_entry, listings_of
from runner.core.loop_host import LoopHost, Overrun
from runner.core.model_call import (
    Cancel,
    CancelledInFlight,
    Model,
    ModelCall,
    ModelFailed,
    OutOfTime,
)
from runner.core.result import AgentResult
from runner.core.resume_cursor import Recorded
from runner.core.spans import NO_SPANS, Spans
from runner.core.steps import action_entry, action_of, call_entries, refused_entries
from runner.core.stop_reasons import StopReason
from runner.core.stop_rules import StopRules
from runner.core.tool_runs import ToolRuns
from runner.core.tools import Tool
from runner.core.tree import ChildRun, Place, TreeStopped, child_run_id, spawn_budgets
from runner.core.tree_inline import InlineParent
from runner.core.waiting import Answer, Asks, decides_alone, wait_entry, waited_for
from runner.errors import ReplayMismatch, RunWaiting

WRAP_UP_NOTE = (
    "Your {budget} budget is spent. Do not call any more tools: "
    'reply now with {{"type": "final", "content": ...}} holding your best answer.'
)


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
    deltas: DeltaSink | None = None,
    limit: str | None = None,
    limits: Limits = NO_LIMITS,
    own_thread: bool = False,
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
    `deltas` takes the pieces of a streaming model's responses in flight (runner.core.deltas).
    `limit` names the provider limit each model call reserves from in `limits` (and settles
    with after); a reservation the run waited for is journaled (`limit_wait`).
    With `own_thread`, the loop runs on a thread of its own and calls a sync model inline,
    while this thread watches the call's deadline and the run's cancel (runner.core.loop_host):
    no thread handoff a model call.
    """
    recorded = journal.recorded()
    # Each recorded step is replayed under the budgets it ran with.
    rules = StopRules(before_changes(budgets, recorded))
    # (A journal made before sub-agents, a test's own, has none of their parts: a root.)
    place = journal.place() if hasattr(journal, "place") else Place()
    draw = None
    if limit is not None:
        draw = Draw(limits, limit, max_tokens_of(model), waited=_journal_wait(journal, rules))
    compacted = Compacted(context) if isinstance(context, Compaction) else None
    model_call = ModelCall(
        model,
        journal,
        deadline=deadline,
        cancel=cancel,
        pause=pause,
        clock=clock,
        context=compacted.view if compacted is not None else context,
        spans=spans,
        deltas=deltas,
        draw=draw,
    )
    tool_runs = ToolRuns(
        tools, journal, rules, model_call.remaining, spans, budgets.max_parallel_tools
    )
    tool_runs.stop_requested = model_call.stop_requested
    # In memory a sub-agent's call runs its child inline, under this run.
    if not getattr(journal, "parks_children", False):
        tool_runs.parent = InlineParent(
            journal.run_id,
            rules,
            place.depth,
            getattr(journal, "above", ()),
            model_call.remaining,
            model_call.cancelled,
            clock,
        )
    loop = _Loop(task, journal, Recorded(recorded, rules.change), rules, model_call, tool_runs)
    if compacted is not None:
        # Its own call (the run's model or the policy's), shown the request as it is.
        policy = compacted.policy
        summary_draw = draw
        own = None if policy.model is None else limit_of(policy.model)
        if draw is not None and own is not None:  # another model's own limit
            summary_draw = Draw(limits, own, max_tokens_of(policy.model), waited=draw.waited)
        summarise = ModelCall(
            policy.model or model,
            journal,
            deadline=deadline,
            cancel=cancel,
            pause=pause,
            clock=clock,
            context=None,
            spans=spans,
            draw=summary_draw,
        )
        loop.compacting = Compacting(compacted, summarise)
    loop.depth = place.depth
    loop.below = place.below
    try:
        if own_thread and _hostable(model, journal):
            # A run nothing can stop from outside (run_agent's, with no cancel) is not watched.
            watch = model_call.stop_requested if model_call.watchable() else None
            host = LoopHost(watch, budgets.model_timeout)
            model_call.host = host
            return host.run(lambda: loop.run(spans), lambda gone: loop.resume(gone, spans))
        return loop.run(spans)
    finally:
        tool_runs.close()


def _hostable(model: Model, journal: Journal) -> bool:
    """Whether the loop can run on a thread of its own with its model called inline: a
    sync model, a journal with no hold on a tree's budgets (a durable child's: a step begun
    again would hold twice) that any thread may write (not an in-memory SQLite database's),
    and a caller outside an event loop (a run inside an async tool, whose calls of async
    tools need the very loop its caller blocks)."""
    if is_async(model) or getattr(journal, "holds_tree", False):
        return False
    if getattr(journal, "thread_bound", False):
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


class _Loop:
    """The order of a step and what it journals, from the task to the run's stop."""

    def __init__(
        self,
        task: str,
        journal: Journal,
        replay: Recorded,
        rules: StopRules,
        model_call: ModelCall,
        tool_runs: ToolRuns,
    ) -> None:
        self.task = task
        self.journal = journal
        self.replay = replay  # what a previous process recorded, taken back step by step
        self.rules = rules
        self.model_call = model_call
        self.tool_runs = tool_runs
        self.transcript: list[dict[str, Any]] = []
        self.depth = 0  # how deep below its tree's root the run is (a child: 1 or more)
        # What its sub-agents spent before this process took the run up: charged once the
        # journal's steps are replayed (each was judged without what came after it).
        self.below = Place().below
        self.compacting: Compacting | None = None  # with a Compaction context

    def run(self, spans: Spans) -> AgentResult:
        if self.replay.take(0, (EntryKind.TASK,)) is None:
            task = Entry(EntryKind.TASK, 0, self.rules.counters, content=self.task)
            self.model_call.expect(self.transcript, task)  # the first call follows the task
            self.journal.append(task)
        self.transcript.append({"role": "user", "content": self.task})
        changed = self.listed()
        if changed is not None:
            self.journal.finish(changed, self.rules.counters)
            return self.result(changed)
        max_depth = self.rules.budgets.max_depth
        if max_depth is not None and self.depth > max_depth:
            too_deep = Stop(
                StopReason.MAX_DEPTH,
                error=f"a sub-agent {self.depth} deep below its root (max_depth={max_depth})",
            )
            self.journal.finish(too_deep, self.rules.counters)
            return self.result(too_deep)
        return self.steps_from(1, spans)

    def resume(self, abandoned: Overrun[Any], spans: Spans) -> AgentResult:
        """Go on from the start of the step whose model call was abandoned on another
        thread (runner.core.loop_host): nothing of the step after that call has run, and
        its attempts go on from that call's end."""
        self.model_call.resumed = abandoned
        return self.steps_from(abandoned.step, spans)

    def steps_from(self, first: int, spans: Spans) -> AgentResult:
        step = first - 1
        while True:
            step += 1
            self.replay.changes()  # a change recorded before this step applies to it
            if step > self.rules.budgets.max_steps:
                break
            self.model_call.at = step
            with spans.step(step):
                stop = self.step(step)
            if stop is not None:
                self.replay.expect_end(step, stop)
                return self.result(stop)
        # Only reached with max_steps == 0 (or one lowered below the steps taken): a zero
        # cap takes zero steps, and makes no model call at all (not even a wrap-up).
        stop = Stop(StopReason.MAX_STEPS)
        self.replay.expect_end(step, stop)
        self.journal.finish(stop, self.rules.counters)
        return self.result(stop)

    def listed(self) -> Stop | None:
        """Journal the listings of the run's listed tools (an MCP server's) when it starts;
        on a resume, the stop if they changed since. A journal begun without them (by a
        release before them) is left as it is: nothing to compare, and no step-0 entry
        may come after its steps."""
        now = listings_of(self.tool_runs.tools)
        recorded = self.replay.take_if(0, EntryKind.TOOLS)
        if recorded is None:
            if now and self.replay.done:
                self.journal.append(listings_entry(now, self.rules.counters))
            return None
        change = listings_change(recorded.args or {}, now)
        return None if change is None else Stop(StopReason.TOOLS_CHANGED, error=change)

    def step(self, step: int) -> Stop | None:
        """One step: the messages sent to the run, the action (replayed or asked for), the
        stop rules, then the tools."""
        self.hear(step)
        compacted = self.compact(step)
        if compacted is not None:
            return compacted
        recorded = self.replay.take_action(step)
        if recorded:
            action = action_of(recorded)
        else:
            if self.below:
                self.rules.charge(self.below)
                self.below = Place().below
            asked = self.next_action()
            if isinstance(asked, Stop):
                return asked
            action = asked
        self.rules.count(step, action)
        reason = self.rules.before_tools(action)
        if reason is StopReason.FINAL:
            return self.answer(recorded, step, action)
        if reason is not None:
            refused = refused_entries(EntryKind.REFUSED, step, self.rules.counters, action)
            return self.stop_after(recorded, refused, reason)
        if action.calls:
            return self.act_together(recorded, step, action)
        return self.act(recorded, step, action)

    def hear(self, step: int) -> None:
        """Show the model the messages sent to the run before this step: those the journal
        recorded here, then (past the record) those waiting, journaled now in one write."""
        while (message := self.replay.take_if(step, EntryKind.MESSAGE)) is not None:
            self.show(message)
        if self.replay.done:
            for message in self.journal.messages(step, self.rules.counters):
                self.show(message)

    def compact(self, step: int) -> Stop | None:
        """Take the summary journaled before this step's model call, or, past the record and
        when one is due, ask for it and journal it (runner.core.compaction); the stop if
        what it spent leaves no budget for the call."""
        entry = self.replay.take_if(step, EntryKind.COMPACTION)
        if entry is None:
            compacting = self.compacting
            if compacting is None or not self.replay.done:
                return None
            due = compacting.compacted.due(self.transcript)
            if due is None:
                return None
            early = self.model_call.check(self.rules.counters.steps)
            if early is not None:
                return self.stop_now(early)
            try:
                entry = compacting.summarise(self.transcript, due, self.rules, step)
            except TreeStopped as stopped:
                return self.stop_now(stopped.stop.reason, error=stopped.stop.error)
            except OutOfTime:
                return self.stop_now(StopReason.TIME_BUDGET)
            except CancelledInFlight:
                return self.stop_now(StopReason.CANCELLED)
            except ModelFailed as failure:
                return self.stop_now(StopReason.MODEL_ERROR, error=f"compaction: {failure}")
            self.journal.append(entry)
            compacting.journaled()
        if self.compacting is not None:
            self.compacting.compacted.apply(entry.args, entry.content)
        self.rules.counters = entry.counters
        reason = self.rules.spent_out()
        return None if reason is None else self.stop_now(reason)

    def next_action(self) -> Action | Stop:
        """The model's next action, unless the run must stop before it is asked."""
        steps = self.rules.counters.steps
        early = self.model_call.check(steps)
        if early is not None:
            return self.stop_now(early)
        tree = self.rules.tree_stop() or (
            self.journal.tree_stop() if hasattr(self.journal, "tree_stop") else None
        )
        if tree is not None:
            return self.stop_now(tree.reason, error=tree.error)
        try:
            return parse_action(self.model_call.ask(self.transcript, self.rules.budgets, steps + 1))
        except TreeStopped as stopped:
            return self.stop_now(stopped.stop.reason, error=stopped.stop.error)
        except OutOfTime:
            return self.stop_now(StopReason.TIME_BUDGET)
        except CancelledInFlight:
            return self.stop_now(StopReason.CANCELLED)
        except ModelFailed as failure:
            return self.stop_now(StopReason.MODEL_ERROR, error=str(failure))

    def answer(self, recorded: Sequence[Entry], step: int, action: Action) -> Stop | None:
        """The model answered: record the answer and the run's end in one write."""
        entry = action_entry(EntryKind.FINAL, step, self.rules.counters, action)
        stop = Stop(StopReason.FINAL, output=action.content)
        self.record(recorded, (entry,), stop)
        self.show(entry)
        if recorded and self.replay.changes():
            return None  # revived after its answer by a message (`runner send --revive`)
        return stop

    def act(self, recorded: Sequence[Entry], step: int, action: Action) -> Stop | None:
        """Record the call, run it (unless its outcome is recorded), record what it gave."""
        # A recorded call keeps the key it was made with (a fork's copied steps keep their
        # parent's): a pending call is settled under the key its tool really saw.
        key = (recorded[0].idempotency_key if recorded else None) or (
            f"{self.journal.run_id}-{step}"
        )
        entry = action_entry(EntryKind.ACTION, step, self.rules.counters, action, key=key)
        self.show(entry)
        answers = self.record_calls(recorded, step, (entry,))
        if isinstance(answers, Stop):
            return answers
        answer = answers.get(entry.idempotency_key)
        started = False
        while self.replay.take_if(step, EntryKind.START) is not None:
            started = True  # a process began the call (a `mark_start` tool's mark)
        observed = self.replay.take(step, (EntryKind.OBSERVATION,))
        fresh = observed is None
        if observed is None:
            # A call a person approved is pending only if a process took it up since.
            pending = bool(recorded) and (answer is None or self.journal.attempt(entry) > 1)
            observed = self.tool_runs.observe(
                entry, action, pending=pending, answer=answer, started=started
            )
        self.rules.counters = observed.counters
        reason = self.rules.after_tools(observed)
        if fresh:
            if reason is None:  # the next model call follows the observation at once
                self.model_call.expect(self.transcript, observed)
            # The stop (if any) is written with the observation: one commit for the step.
            stop = self.rules.stop_with(reason)
            later = self.later(answer) if stop is None else None
            if later is not None:
                # Its answer alone decided it (no tool ran), and the journal holds the
                # answer: a resume derives it again, so it rides in the run's next write.
                later(observed)
            else:
                self.journal.append(observed, stop)
        self.show(observed)
        if reason is not None and not fresh and self.replay.changes():
            return None  # a recorded stop that a revival lifted
        return self.after(reason)

    def act_together(self, recorded: Sequence[Entry], step: int, action: Action) -> Stop | None:
        """Record every call in one write before any runs, run those whose outcome is not
        recorded at once (at most max_parallel_tools), and record each outcome as it ends."""
        calls = call_entries(
            EntryKind.ACTION, step, self.rules.counters, action, self.journal.run_id
        )
        if recorded:  # the keys the calls were made with (a fork's keep their parent's)
            calls = [
                replace(call, idempotency_key=row.idempotency_key)
                for call, row in zip(calls, recorded, strict=True)
            ]
        answers = self.record_calls(recorded, step, calls)
        if isinstance(answers, Stop):
            return answers
        started: set[str | None] = set()
        observed = self.replayed_outcomes(step, calls, started)
        # After people's answers, the step's calls (answered or not: none ran before every
        # answer was in) are pending only if a process took the step up since.
        pending = bool(recorded) and (not answers or self.journal.attempt(calls[0]) > 1)
        ran = self.tool_runs.run_together(
            calls, observed, pending=pending, answers=answers, started=started
        )
        last = observed[-1]  # the last recorded: the step's counters, its stop if any
        self.rules.counters = last.counters
        self.transcript.extend(step_messages(calls, observed))
        reason = self.rules.after_tools(last)
        if reason is not None and not ran and self.replay.changes():
            return None  # a recorded stop that a revival lifted
        return self.after(reason)

    def replayed_outcomes(
        self, step: int, calls: Sequence[Entry], started: set[str | None]
    ) -> list[Entry]:
        """The observations a previous process recorded for the step's calls, in its order;
        the keys of the calls it marked as started go into `started`."""
        keys = {call.idempotency_key for call in calls}
        observed: list[Entry] = []
        while len(observed) < len(calls):
            entry = self.replay.take(step, (EntryKind.OBSERVATION, EntryKind.START))
            if entry is None:
                break
            if entry.kind is EntryKind.START and entry.idempotency_key in keys:
                started.add(entry.idempotency_key)
                continue
            if entry.idempotency_key not in keys:
                raise ReplayMismatch(
                    f"step {step} has an observation (key {entry.idempotency_key}) for none "
                    "of its calls: the agent's budgets or code changed since the run started"
                )
            keys.discard(entry.idempotency_key)
            observed.append(entry)
        return observed

    def after(self, reason: StopReason | None) -> Stop | None:
        if reason is None:
            return None
        return self.wrap_up(reason) if self.rules.wraps_up(reason) else Stop(reason)

    # -- people in the loop ---------------------------------------------------------------

    def record_calls(
        self, recorded: Sequence[Entry], step: int, calls: Sequence[Entry]
    ) -> dict[str | None, Entry] | Stop:
        """Record the step's calls (unless the journal holds them), then the answers they
        need before any runs (`answers_for`).

        Calls that need an answer are recorded in the write that parks the run for it, with
        their waits: no call of the step runs before that write, so a crash before it leaves
        nothing of the step and the model is asked again, as for a crash before any action's
        write. A commit fewer for each person's answer and each sub-agent's call.
        """
        if recorded or not self.replay.done:
            self.record(recorded, calls, None)
            return self.answers_for(step, calls)
        waits = [found for call in calls if (found := self.wait_of(call)) is not None]
        if not waits:
            self.record(recorded, calls, None)
            return {}
        return self.park(calls, waits)

    def park(self, calls: Sequence[Entry], waits: Sequence[Entry]) -> Stop:
        """Record `calls` (those not recorded yet) and their waits in ONE write that lets the
        run's worker go, with the child runs its sub-agents' calls start; RunWaiting, or the
        Stop when a cancel came first (the run finished in that write)."""
        children = self.children_of(waits)
        entries = [*calls, *waits]
        parked = self.journal.wait(entries, children) if children else self.journal.wait(entries)
        if not parked:
            return Stop(StopReason.CANCELLED)
        raise self.waiting(waits)

    def waiting(self, unanswered: Sequence[Entry]) -> RunWaiting:
        """What stops the run while `unanswered` waits go unanswered."""
        asked = "; ".join(
            f"sub-agent run {child_run_id(self.journal.run_id, wait.idempotency_key or '')}"
            if wait.waits_for == Asks.CHILD
            else f"a person's {wait.waits_for}: {wait.content} (call {wait.idempotency_key})"
            for wait in unanswered
        )
        return RunWaiting(
            f"run {self.journal.run_id} waits for {asked}",
            run_id=self.journal.run_id,
            waits_for=waited_for(wait.waits_for for wait in unanswered),
        )

    def answers_for(self, step: int, calls: Sequence[Entry]) -> dict[str | None, Entry] | Stop:
        """The people's answers the step's calls need before any of them runs, by call key:
        empty if none needs one.

        The calls that need one are journaled as waiting, one wait each, in ONE commit
        (`journal.wait`: the run lets its worker go in it), and the run stops here with
        RunWaiting (or with the Stop when a cancel came first) until every answer is in.
        Until then no call of the step runs, not even one that needs no answer: the model
        asked for the calls together, a person answers with none of them done (a cancel
        while waiting leaves no effect of the step), and their outcomes come from one moment.
        """
        waits: list[Entry] = []
        while (wait := self.replay.take_if(step, EntryKind.WAIT)) is not None:
            waits.append(wait)
        if not waits:
            if not self.replay.done:
                return {}  # journaled already: the calls went ahead
            # Calls recorded without their waits (by a release that wrote them apart, then
            # crashed between the two writes): the waits alone now.
            waits = [found for call in calls if (found := self.wait_of(call)) is not None]
            if not waits:
                return {}
            return self.park((), waits)
        answers: dict[str | None, Entry] = {}
        while (answer := self.replay.take_if(step, EntryKind.ANSWER)) is not None:
            answers[answer.idempotency_key] = answer
        unanswered = [wait for wait in waits if wait.idempotency_key not in answers]
        if unanswered:
            if not self.replay.done:  # something else follows an unanswered wait
                self.replay.take(step, (EntryKind.ANSWER,))  # raises ReplayMismatch
            raise self.waiting(unanswered)
        return answers

    def later(self, answer: Entry | None) -> Callable[[Entry], None] | None:
        """What records the observation of a call answered with `answer` in the run's next
        write, if it may wait for it: the answer decided it alone, and the journal can hold
        an entry back (a durable one: runner.sql.journal)."""
        if answer is None or not decides_alone(Answer(str(answer.answer))):
            return None
        later: Callable[[Entry], None] | None = getattr(self.journal, "append_with_next", None)
        return later

    def wait_of(self, call: Entry) -> Entry | None:
        """The wait a call needs before it runs, or None if it needs no answer."""
        tool = self.tool_runs.tools.get(call.tool or "")
        if tool is None or call.action_type is not ActionKind.TOOL:
            return None
        if tool.sub_agent is not None:
            # A durable run parks for its child; a call that cannot start one (no task) is
            # run as a tool, whose error the model is shown.
            if not getattr(self.journal, "parks_children", False) or _task_of(call) is None:
                return None
            return wait_entry(call, Asks.CHILD, self.rules.counters)
        asks = tool.asks(call.args)
        return None if asks is None else wait_entry(call, asks, self.rules.counters)

    def children_of(self, waits: Sequence[Entry]) -> list[ChildRun]:
        """The child runs the step's sub-agent calls start, each under what this run has
        left (its budgets, less what it and the runs below it spent; its deadline)."""
        children = []
        for wait in waits:
            if wait.waits_for != Asks.CHILD:
                continue
            sub = self.tool_runs.tools[wait.tool or ""].sub_agent
            key = wait.idempotency_key or ""
            budgets = spawn_budgets(
                sub.budgets, self.rules.budgets, self.rules.spent(), self.model_call.remaining()
            )
            task = _task_of(wait) or ""
            first = first_call_tokens(sub.agent, task)
            children.append(
                ChildRun.started(self.journal.run_id, key, sub.agent, task, budgets, first)
            )
        return children

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
        wraps_up = self.rules.wraps_up
        if recorded:
            self.record(recorded, entries, Stop(reason))  # a check only: it is recorded
            if self.replay.changes():
                return None
            return self.wrap_up(reason) if wraps_up(reason) else Stop(reason)
        if wraps_up(reason):
            self.record(recorded, entries, None)
            return self.wrap_up(reason)
        stop = Stop(reason)
        self.record(recorded, entries, stop)
        return stop

    def stop_now(self, reason: StopReason, *, error: str | None = None) -> Stop:
        """Stop before asking the model (cancelled, out of time, the model failing)."""
        if self.rules.wraps_up(reason):
            return self.wrap_up(reason)
        stop = Stop(reason, error=error)
        self.journal.finish(stop, self.rules.counters)
        return stop

    def wrap_up(self, reason: StopReason) -> Stop:
        """One last model call, told that the budget is spent and it must answer now."""
        c = self.rules.counters
        step = c.steps
        note = self.replay.take(step, (EntryKind.WRAP_UP,))
        if note is None:
            note = Entry(EntryKind.WRAP_UP, step, c, content=WRAP_UP_NOTE.format(budget=reason))
            self.journal.append(note)
        self.show(note)
        answer = self.replay.take(step, (EntryKind.FINAL, EntryKind.REFUSED))
        if answer is None:
            action = self.model_call.last_action(self.transcript, self.rules.budgets, reason, step)
            counters = replace(c, tokens=c.tokens + action.tokens, cost=c.cost + action.cost)
            kind = EntryKind.FINAL if action.kind is ActionKind.FINAL else EntryKind.REFUSED
            answer = action_entry(kind, step, counters, action)
            wrapped = Stop(reason, output=action.content, wrapped_up=True)
            self.journal.append(answer, wrapped if kind is EntryKind.FINAL else Stop(reason))
        self.rules.counters = answer.counters
        if answer.kind is EntryKind.FINAL:
            self.show(answer)
            return Stop(reason, output=answer.content, wrapped_up=True)
        return Stop(reason)

    def result(self, stop: Stop) -> AgentResult:
        c = self.rules.counters
        steps = self.rules.budgets.max_steps if stop.reason is StopReason.MAX_STEPS else c.steps
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


def _task_of(call: Entry) -> str | None:
    """A sub-agent call's task, if the model gave one a child run can take."""
    task = (call.args or {}).get("task")
    return task if isinstance(task, str) and task.strip() else None


def _journal_wait(journal: Journal, rules: StopRules) -> Callable[[Reservation], None]:
    """What records that a model call waited for its limit: a `limit_wait` entry."""

    def record(reservation: Reservation) -> None:
        journal.append(limit_wait_entry(rules.counters, reservation))

    return record


def _decision(entry: Entry, stop: Stop | None) -> str:
    """What the loop now decides at a step, in words (for a ReplayMismatch)."""
    if entry.kind is EntryKind.FINAL:
        return "answers"
    if entry.kind is EntryKind.REFUSED:
        return f"refuses the action ({stop.reason})" if stop is not None else "refuses the action"
    return f"calls {entry.tool}" if entry.action_type is ActionKind.TOOL else "records the action"
