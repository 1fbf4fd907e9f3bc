"""The tool-call side of a foreign run (runner.core.foreign): each call the framework makes is
run, or settled, with its outcome journaled as the call ends.

A call the journal holds an outcome for gets that outcome (the tool is not run again); a call
a crash left pending is settled by its tool's declaration (idempotent, reconcile, mark_start:
runner.core.tools, run by runner.core.tool_runs); a call past the journal's end runs live. A
sub-agent's call starts its child run and parks until it ends; a call that needs a person's
approval waits for it (`approvals`). A call the journal's step never asked for has diverged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NoReturn

from runner.core.foreign_record import ForeignRecord, StepRows
from runner.core.foreign_values import Outcome, Stopped
from runner.core.journal import Entry, Stop
from runner.core.limits import first_call_tokens
from runner.core.stop_reasons import StopReason
from runner.core.tool_runs import ToolRuns
from runner.core.tools import Tool
from runner.core.tree import ChildRun, child_run_id, spawn_budgets
from runner.core.waiting import Answer, Asks, observation_of, wait_entry
from runner.errors import RunWaiting


class ToolCalls(ForeignRecord):
    """`ForeignRun`'s tool calls: run, settled, approved, their outcomes journaled."""

    def runs_live(self, call_id: str) -> bool:
        """Whether this call of the current step is past the journal's end (its step's action
        written by this process): `call` then runs the tool, with nothing to settle first."""
        step = self.steps.get(self.step)
        return step is not None and not step.recorded and step.call(call_id) is not None

    def recorded_outcome(self, call_id: str) -> Outcome | None:
        """The outcome the journal holds for this call of the current step, if any."""
        entry = self._call(call_id)
        found = self.steps[self.step].outcomes.get(entry.idempotency_key or "")
        return None if found is None else Outcome(str(found.content), found.is_error)

    def call(
        self,
        call_id: str,
        run: Callable[[], Any],
        tool: Tool | None = None,
        task: str | None = None,
    ) -> Outcome:
        """Run this call of the current step (`run` calls the tool, sync or async), or
        settle it if a crash left it pending; its outcome journaled before it returns.
        `tool` declares how (idempotent, reconcile, mark_start, timeout); by default the
        declaration registered under the call's tool name. A sub-agent's call starts its
        child run on `task` (by default the call's `task` argument)."""
        entry = self._call(call_id)
        step = self.steps[self.step]
        key = entry.idempotency_key or ""
        recorded = step.outcomes.get(key)
        if recorded is not None:
            return Outcome(str(recorded.content), recorded.is_error)
        with self.writing:
            self._flush()  # the step's calls, if kept (`ask_on_loop`): before any tool runs
        declared = tool or self.tools.get(entry.tool or "") or Tool(run)
        runs = ToolRuns(
            {entry.tool or "": replace(declared, fn=run, sub_agent=None)},
            self.journal,
            self.rules,
            self.model_call.remaining,
            self.spans,
            1,
        )
        answer = step.answers.get(key)
        sub = declared.sub_agent
        if sub is not None and getattr(self.journal, "parks_children", False):
            if answer is None:
                self._park_for_child(step, entry, sub, task)
            pending = False  # the child's end is the outcome: nothing runs here
        # A call a person approved is pending only if a process took it up since.
        else:
            pending = step.recorded and (answer is None or self.journal.attempt(entry) > 1)
        try:
            content, is_error, attempt = runs.answered(entry, answer, pending, key in step.started)
        finally:
            runs.close()
        written = self._write_outcome(step, entry, content, is_error, attempt)
        return Outcome(str(written.content), written.is_error)

    def _park_for_child(
        self, step: StepRows, call: Entry, sub: Any, task: str | None = None
    ) -> NoReturn:
        """A sub-agent's call: start its child run (its id derived from the call's key, so a
        crash re-attaches to it) under what this run has left, and park until it ends."""
        key = call.idempotency_key or ""
        if key not in step.waits:
            task = task or (call.args or {}).get("task")
            budgets = spawn_budgets(
                sub.budgets, self.rules.budgets, self.rules.spent(), self.model_call.remaining()
            )
            said = task if isinstance(task, str) else json.dumps(call.args)
            first = first_call_tokens(sub.agent, said)
            child = ChildRun.started(self.journal.run_id, key, sub.agent, said, budgets, first)
            wait = wait_entry(call, Asks.CHILD, self.rules.counters)
            with self.writing:
                self._flush()
                if not self.journal.wait([wait], [child]):
                    raise Stopped(Stop(StopReason.CANCELLED))  # the cancel ended the run
            step.waits[key] = wait
        child_id = child_run_id(self.journal.run_id, key)
        raise RunWaiting(
            f"run {self.journal.run_id} waits for sub-agent run {child_id} (call {key})",
            run_id=self.journal.run_id,
            waits_for=("sub-agents",),
        )

    def _call(self, call_id: str) -> Entry:
        step = self.steps.get(self.step)
        entry = None if step is None else step.call(call_id)
        if entry is None:
            self._diverged(
                f"the agent calls a tool (call {call_id}) step {self.step} never asked for"
            )
        return entry

    # -- people in the loop ---------------------------------------------------------------

    def approvals(self, call_ids: Sequence[str]) -> dict[str, str | None]:
        """People's answers to these calls of the current step, by call id: None for an
        approval (the call runs), else what the model is shown for a denial (journaled as
        the call's outcome, as runner's own loop does). The calls not answered yet are
        journaled as waits, in ONE commit that lets the run's worker go, and RunWaiting is
        raised: the run resumes once every answer is in (a cancel first stops it)."""
        step = self.steps[self.step]
        calls = [self._call(call_id) for call_id in call_ids]
        answers: dict[str, str | None] = {}
        new_waits = []
        for call in calls:
            key = call.idempotency_key or ""
            answer = step.answers.get(key)
            if answer is None:
                if key not in step.waits:
                    new_waits.append(wait_entry(call, Asks.APPROVAL, self.rules.counters))
                continue
            denied = observation_of(Answer(str(answer.answer)), answer.content)
            if denied is None:
                answers[call.call_id or ""] = None
                continue
            written = step.outcomes.get(key)
            if written is None:
                written = self._write_outcome(step, call, denied[0], denied[1], 1)
            answers[call.call_id or ""] = str(written.content)
        if len(answers) == len(calls):
            return answers
        if new_waits:
            with self.writing:
                self._flush()
                if not self.journal.wait(new_waits):
                    raise Stopped(Stop(StopReason.CANCELLED))  # the cancel ended the run
            for wait in new_waits:
                step.waits[wait.idempotency_key or ""] = wait
        asked = "; ".join(
            f"approval of {call.tool} (call {call.idempotency_key})"
            for call in calls
            if call.call_id not in answers
        )
        raise RunWaiting(
            f"run {self.journal.run_id} waits for {asked}",
            run_id=self.journal.run_id,
            waits_for=("answer",),
        )
