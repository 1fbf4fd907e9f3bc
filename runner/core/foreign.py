"""A run whose loop is another framework's (Pydantic AI, the OpenAI Agents SDK): runner owns
what crosses the process boundary, the framework keeps its own loop.

The framework's code asks this module at each of its model requests and tool calls; every one
goes through the journal as runner's own loop would write it (the same entries, keys and
settlement), committed before the framework goes on. On resume the framework's code runs again
from the start: each request the journal holds is answered from it (the model is not asked
again), each call whose outcome it holds gets that outcome (the tool is not run again), and a
call a crash left pending is settled by its tool's declaration (`runner.core.tools`). Past the
journal's end the run goes on live. A framework that asks for something the journal does not
hold at that place has diverged: the run stops with `diverged`, never takes another path.

The run is split by idea: what it holds and how it writes (runner.core.foreign_record), its
model requests, replayed or asked, and the stop rules around them
(runner.core.foreign_requests), its tool calls, run or settled, and approvals
(runner.core.foreign_calls), and the values the glue exchanges with it
(runner.core.foreign_values). This module joins the two sides into `ForeignRun`, with the
run's start (its task, its tool listings) and its end, and drives a framework's loop
(`drive_foreign`); the values are re-exported here, where the glue imports them.

Framework glue (`runner.integrations`: runner.integrations.pydantic_ai,
runner.integrations.openai_agents) turns its messages into `Reply` and back; this module knows
no framework, no SQL and no provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from runner.core.actions import Action, ActionKind, parse_action
from runner.core.budgets import Budgets
from runner.core.calls import described, invoke
from runner.core.foreign_calls import ToolCalls
from runner.core.foreign_record import StepRows
from runner.core.foreign_requests import ModelRequests
from runner.core.foreign_values import LiveReply, Outcome, Pieces, Reply, Stopped
from runner.core.journal import Entry, EntryKind, Journal, Stop, transcript_of
from runner.core.listings import listings_change, listings_entry
from runner.core.result import AgentResult
from runner.core.steps import action_entry
from runner.core.stop_reasons import StopReason
from runner.core.tools import Tool

__all__ = [
    "ForeignRun",
    "LiveReply",
    "Outcome",
    "Pieces",
    "Reply",
    "Stopped",
    "drive_foreign",
    "idempotent_said",
]


class ForeignRun(ModelRequests, ToolCalls):
    """One run of a framework's loop, journaled. Thread-safe: a framework may call its tools
    at once (each outcome is written one at a time, under a lock)."""

    def begin(self, keep_task: bool = False) -> None:
        """The run's first entry (its task), unless recorded; `max_depth` for a child.
        `keep_task`: written with the run's first write (its first action, most often), a
        commit a run fewer; a crash before that leaves no entry, and the resume writes it.
        Not for a run whose first model call streams: its followers see the task first."""
        if not self.task_recorded:
            task = Entry(EntryKind.TASK, 0, self.rules.counters, content=self.task)
            if keep_task:
                self.unwritten.append(task)
                self.entries.append(task)
            else:
                self._append(task)
        max_depth = self.rules.budgets.max_depth
        if max_depth is not None and self.place.depth > max_depth:
            error = f"a sub-agent {self.place.depth} deep below its root (max_depth={max_depth})"
            self._stop(Stop(StopReason.MAX_DEPTH, error=error))

    def listed(self, listings: Mapping[str, Any]) -> None:
        """What the servers of the framework's MCP tools list for them (by the name the model
        calls each), as the framework sees them before its first model request: journaled
        once when the run starts; on a resume, compared with what it started with, and the
        run stops `tools_changed` (naming the tools) if they differ. Later calls do nothing."""
        if self.listings_checked:
            return
        self.listings_checked = True
        recorded = self.listings
        if recorded is None:
            # A journal begun without them (no MCP tool then) gets none after its steps.
            if listings and self.last_recorded == 0:
                entry = listings_entry(listings, self.rules.counters)
                self._append(entry)
                self.listings = entry
            return
        change = listings_change(recorded.args or {}, listings)
        if change is not None:
            self._stop(Stop(StopReason.TOOLS_CHANGED, error=change))

    def end(self, output: Any) -> Stop:
        """The framework ended with `output`: the run's final entry and its stop, in one
        commit (the reply it ended on is the final action)."""
        if self.step < self.last_recorded:
            self._diverged(
                f"the agent ends at step {self.step}, but the journal goes on to step "
                f"{self.last_recorded}"
            )
        tokens, cost = 0, 0.0
        if self.pending_reply is not None and self.pending_reply[0] == self.step:
            tokens, cost = self.pending_reply[1].tokens, self.pending_reply[1].cost
            self.pending_reply = None
        recorded = self.steps.get(self.step)
        # Replayed to its recorded end: the final is the step's first action, or follows its
        # calls when the framework ended without asking again (an Agents SDK handoff's child).
        finals = [a for a in recorded.actions if a.kind is EntryKind.FINAL] if recorded else []
        if finals:
            return Stop(StopReason.FINAL, output=finals[0].content)
        checked = parse_action({"type": "final", "content": output})
        if checked.kind is not ActionKind.FINAL:
            checked = Action(ActionKind.FINAL, content=str(output))
        action = replace(checked, tokens=tokens, cost=cost)
        stop = Stop(StopReason.FINAL, output=action.content)
        step = self.steps.setdefault(self.step, StepRows())
        unanswered = [
            call
            for call in step.actions
            if call.kind is EntryKind.ACTION and call.idempotency_key not in step.outcomes
        ]
        for call in unanswered:  # calls the framework skipped once it had its output
            self._write_outcome(step, call, "not run: the agent had its answer", False, 1)
        entry = action_entry(EntryKind.FINAL, self.step, self.rules.counters, action)
        self._append(entry, stop)
        return stop

    @property
    def replaying(self) -> bool:
        """Whether the framework is still being fed the journal (not yet past its end)."""
        return self.step <= self.last_recorded

    def fail(self, exc: BaseException, reason: StopReason) -> Stop:
        """The framework raised (its own limits, a model that kept failing): the run stops
        for `reason`, the error kept."""
        prefix = "diverged from the journal: " if reason is StopReason.DIVERGED else ""
        stop = Stop(reason, error=prefix + described(exc))
        self._finish(stop)
        return stop

    def result(self, stop: Stop) -> AgentResult:
        c = self.rules.counters
        return AgentResult(
            stop_reason=stop.reason,
            output=stop.output,
            steps=c.steps,
            transcript=transcript_of(self.entries),
            tokens=c.tokens,
            cost=c.cost,
            error=stop.error,
            run_id=self.journal.run_id,
        )


def drive_foreign(
    tools: Mapping[str, Tool],
    task: str,
    budgets: Budgets,
    journal: Journal,
    options: dict[str, Any],
    loop: Callable[[ForeignRun, str], Any],
    stop_for: Callable[[ForeignRun, Exception], StopReason | None],
    streams: bool = False,
) -> AgentResult:
    """runner.core.loop.drive's part for a framework's agent: its own `loop` (a coroutine
    function of the run and the task), journaled. `stop_for` names the stop an exception of
    the framework's means (None: not the framework's, raised on); `streams`: the agent's
    model requests stream their pieces to the run's followers."""
    options.pop("context", None)  # what a framework's model is shown is the framework's
    run = ForeignRun(tools, task, budgets, journal, **options)
    try:
        run.begin(keep_task=not streams)
        output = invoke(loop, (run, task), {}, None)
        stop = run.end(output)
    except Stopped as stopped:
        stop = stopped.stop
    except Exception as exc:
        reason = stop_for(run, exc)
        if reason is None:
            raise
        stop = run.fail(exc, reason)
    return run.result(stop)


def idempotent_said(names: Iterable[str] | Mapping[str, bool]) -> dict[str, bool]:
    """A RunnerAgent's `idempotent=`: tool names (each True), or names to True or False."""
    if isinstance(names, Mapping):
        return {str(name): bool(said) for name, said in names.items()}
    if isinstance(names, str):
        raise ValueError(f"idempotent is a collection of tool names, not the string {names!r}")
    return dict.fromkeys(names, True)
