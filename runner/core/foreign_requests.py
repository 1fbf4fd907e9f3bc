"""The model-request side of a foreign run (runner.core.foreign): the framework's requests
answered from the journal on replay, asked live past its end, and judged by runner's stop
rules.

One model request is one step. A response with function tool calls records them (one row per
call, keys `<run>-<step>` or `<run>-<step>.<n>`) before any runs (the calls' outcomes are
runner.core.foreign_calls's). A response with no call waits in memory: it becomes the run's
`final` if the framework ends on it, or an `invalid` action (with the framework's complaint as
its observation) when the framework asks again instead. The stop rules are runner's, applied
where its loop applies them: before a request (cancel, time, steps, tree), after a response
(tokens, cost, repeats) and once a step's outcomes are in (the error streak, the step cap).

A request the journal answers is not sent to the model; at the next request, the outcomes the
framework shows the model must be those the journal holds, else the run has diverged.

A response whose parts the reply does not say (thinking with its signature, reasoning, the
provider's ids of its items) keeps the framework's own JSON of it in a `response` entry, in the
commit of the step's action and before it: on resume the framework is handed the very parts it
first got, so what it sends the provider next is what an uninterrupted run sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any

from runner.core.actions import Action, ActionKind, Call
from runner.core.calls import CallTimedOut, described, on_shared_loop, watched
from runner.core.deltas import current_stream
from runner.core.foreign_record import ForeignRecord, StepRows
from runner.core.foreign_values import LiveReply, Outcome, Pieces, Reply, Stopped
from runner.core.interrupts import CallInterrupted, checking
from runner.core.journal import Entry, EntryKind, Stop
from runner.core.model_call import CancelledInFlight, ModelFailed, ModelTimedOut, OutOfTime
from runner.core.steps import action_entry, call_entries, observation_entry, refused_entries
from runner.core.stop_reasons import StopReason
from runner.core.tree import Place
from runner.errors import ModelFatal, RunPaused


class ModelRequests(ForeignRecord):
    """`ForeignRun`'s model requests: replayed, asked, recorded and judged."""

    def recorded_reply(self, returned: Mapping[str, Outcome], retry: str | None) -> Reply | None:
        """At the framework's next model request: settle the step before it (the outcomes
        the framework produced without running a tool, `returned` by call id; `retry`, its
        complaint about a reply with no call), then the journal's reply for this step, if
        it holds one (None: the request goes to the model, `ask`)."""
        self._close_step(returned, retry)
        self.step += 1
        step = self.steps.get(self.step)
        if step is None or not step.actions:
            if step is not None:
                step.recorded = False  # its messages only: its calls are made here
            return None
        first = step.actions[0]
        if first.kind is EntryKind.FINAL and isinstance(first.content, str):
            # The answer it ended on (`runner replay` goes this far): a reply with no call.
            self.rules.counters = first.counters
            self.pending_reply = (self.step, Reply(text=first.content, tokens=first.tokens))
            return Reply(text=first.content, tokens=first.tokens, cost=first.cost)
        if first.kind is not EntryKind.ACTION:
            # A refused step ended the run: a run resumed past it has diverged.
            self._diverged(f"step {self.step} is recorded as {first.kind}, yet the agent asks on")
        # The step's calls: not the final that may follow them (an Agents SDK handoff's
        # child run answers for this run, which ends at the handoff's step).
        rows = [entry for entry in step.actions if entry.kind is EntryKind.ACTION]
        action = _action_of_rows(rows)
        self.rules.count(self.step, action)
        self.rules.counters = rows[-1].counters
        raw = None if step.response is None else (step.response.args or {}).get("response")
        if first.action_type is ActionKind.INVALID:
            call = Call(first.tool, first.args or {}, first.call_id) if first.tool else None
            return Reply(
                text=None if call else first.content,
                output_call=call,
                tokens=first.tokens,
                cost=first.cost,
                raw=raw,
            )
        calls = tuple(Call(e.tool or "", e.args or {}, e.call_id) for e in rows)
        return Reply(text=first.content, calls=calls, tokens=first.tokens, cost=first.cost, raw=raw)

    def heard(self) -> list[Any]:
        """The messages sent to the run (`runner send`) that the model is shown before this
        step's request: those the journal recorded here, then (past the record) those
        waiting, journaled now in one write; the framework adds them as user turns."""
        step = self.steps.setdefault(self.step, StepRows())
        if not step.actions:  # live: what was sent since
            if self.unwritten and getattr(self.journal, "messages_waiting", True):
                self._flush()  # the task before the messages
            fresh = list(self.journal.messages(self.step, self.rules.counters))
            self.entries.extend(fresh)
            step.messages.extend(fresh)
        return [entry.content for entry in step.messages]

    def ask(
        self,
        request: Callable[[Pieces | None], Coroutine[Any, Any, Any]],
        reply_of: Callable[[Any], LiveReply],
        shown: Any,
        loop: asyncio.AbstractEventLoop,
        failed: Exception | None = None,
    ) -> Any:
        """The model's response to this step's request, asked now (the journal holds none):
        the checks before it, its retries (`request` is called again on failure), the stop
        rules after it; its calls are journaled before it returns. `request` makes the
        framework's request, a coroutine for the framework's `loop`, handed where the pieces
        of a streamed response go (None: nobody follows them); `reply_of` turns what it
        returned into (Reply, the framework's response); `shown` is what the request sends
        (its messages), for the provider limit's estimate; `failed`, what the first attempt
        raised if `ask_on_loop` made it. Called off the framework's loop."""
        self._before_request()
        answered: list[LiveReply] = []
        answer = self._answer(reply_of, answered)

        def pieces() -> Pieces | None:
            stream = current_stream()  # the call's context has it
            return None if stream is None else Pieces(stream)

        async def on_loop(_shown: Any) -> dict[str, Any]:
            return answer(await request(pieces()))

        def from_thread(_shown: Any) -> dict[str, Any]:
            return answer(asyncio.run_coroutine_threadsafe(request(pieces()), loop).result())

        # The framework's loop is runner's shared one (not a run nested in an async tool):
        # the model call awaits the request there, with no thread of its own between, which
        # on a busy machine costs more than the rest of the step's Python.
        self.model_call.model = on_loop if on_shared_loop(loop) else from_thread
        try:
            self.model_call.ask(shown, self.rules.budgets, self.step, failed)
        except OutOfTime:
            self._stop(Stop(StopReason.TIME_BUDGET))
        except CancelledInFlight:
            self._stop(Stop(StopReason.CANCELLED))
        except ModelFailed as failure:
            self._stop(Stop(StopReason.MODEL_ERROR, error=str(failure)))
        reply, response = answered[0]
        self._record_reply(reply)
        return response

    def asks_on_loop(self) -> bool:
        """Whether `ask_on_loop` may make this step's request: nothing around its first
        attempt waits for the database (no provider limit to reserve from, no tree above to
        hold the call against), so the framework's loop need not hand it to a thread."""
        return self.model_call.draw is None and self.place.depth == 0

    async def ask_on_loop(
        self,
        request: Callable[[Pieces | None], Coroutine[Any, Any, Any]],
        reply_of: Callable[[Any], LiveReply],
        shown: Any,
    ) -> Any:
        """`ask`, its first attempt awaited on the framework's loop (when `asks_on_loop`;
        the request streams to nobody), with no thread between. A first attempt that fails
        goes on in `ask` on a thread (its retries sleep). The reply's calls are kept for the
        run's next write, which is the first call's, before its tool runs (`call`): a
        step's action and its tool share the thread the framework runs the tool on."""
        self._before_request()
        call = self.model_call
        call.held = None  # a root holds nothing against a tree (`ModelCall.hold_tree`)
        remaining = call.remaining()
        if remaining is not None and remaining <= 0:
            self._stop(Stop(StopReason.TIME_BUDGET))
        own = self.rules.budgets.model_timeout
        run_ends_first = own is None or (remaining is not None and remaining <= own)
        answered: list[LiveReply] = []
        answer = self._answer(reply_of, answered)
        failed: Exception | None = None
        try:
            with self.spans.model_call(self.step) as span, checking(call.stop_requested):
                output = await watched(
                    request(None), remaining if run_ends_first else own, call.stop_requested
                )
                span.returned(answer(output))
        except CallTimedOut:
            if run_ends_first:
                self._stop(Stop(StopReason.TIME_BUDGET))
            failed = ModelTimedOut(
                f"model call took longer than its model_timeout, {own:g} s: given up"
            )
        except CallInterrupted as exc:
            if exc.reason == "paused":
                raise RunPaused(f"run {self.journal.run_id} paused during its model call") from None
            self._stop(Stop(StopReason.CANCELLED))
        except ModelFatal as exc:
            self._stop(Stop(StopReason.MODEL_ERROR, error=described(exc)))
        except Exception as exc:
            failed = exc
        if failed is not None:
            loop = asyncio.get_running_loop()
            return await asyncio.to_thread(self.ask, request, reply_of, shown, loop, failed)
        # In memory: the calls are committed by the first of them to run, on its own thread
        # (`call`), before its tool runs (a budget that stops the run here writes at once).
        self._record_reply(answered[0][0], keep=True)
        return answered[0][1]

    def _before_request(self) -> None:
        """The checks before a model request: charges from below, pause, cancel, deadline,
        steps, the tree's budgets."""
        if self.place.below:
            # What its sub-agents spent before this process took the run up.
            self.rules.charge(self.place.below)
            self.place = replace(self.place, below=Place().below)
        early = self.model_call.check(self.rules.counters.steps)
        if early is not None:
            self._stop(Stop(early))
        if self.step > self.rules.budgets.max_steps:
            self._stop(Stop(StopReason.MAX_STEPS))
        tree = self.rules.tree_stop() or (
            self.journal.tree_stop() if hasattr(self.journal, "tree_stop") else None
        )
        if tree is not None:
            self._stop(Stop(tree.reason, error=tree.error))

    @staticmethod
    def _answer(
        reply_of: Callable[[Any], LiveReply], answered: list[LiveReply]
    ) -> Callable[[Any], dict[str, Any]]:
        """What the model call makes of the framework's response: the reply kept in
        `answered`, and what traces and the provider limit read of it (the calls or the
        text, and usage)."""

        def answer(response: Any) -> dict[str, Any]:
            live = reply_of(response)
            answered[:] = [live]
            reply = live[0]
            usage = {"tokens": reply.tokens, "cost": reply.cost}
            if reply.calls:
                calls = [{"name": c.tool, "args": c.args, "id": c.id} for c in reply.calls]
                return {"type": "tool", "calls": calls, "text": reply.text, "usage": usage}
            return {"type": "final", "content": reply.text or "", "usage": usage}

        return answer

    def _record_reply(self, reply: Reply, keep: bool = False) -> None:
        """The reply as the step's rows; `keep`: left for the run's next write (the first of
        its calls, which commits them before its tool runs: `call`), else written now."""
        step = self.steps.setdefault(self.step, StepRows())
        if not reply.calls:
            # Judged at the framework's next move: its end (final) or a new request.
            self.pending_reply = (self.step, reply)
            action = Action(ActionKind.FINAL, content="", tokens=reply.tokens, cost=reply.cost)
            self.rules.count(self.step, action)
            self._budget_stop(action, [])
            return
        action = _tool_action(reply)
        self.rules.count(self.step, action)
        counters = self.rules.counters
        if len(reply.calls) == 1:
            key = f"{self.journal.run_id}-{self.step}"
            rows = [action_entry(EntryKind.ACTION, self.step, counters, action, key=key)]
        else:
            rows = call_entries(EntryKind.ACTION, self.step, counters, action, self.journal.run_id)
        self._budget_stop(action, rows)
        step.actions = rows
        if reply.raw is not None:  # before the actions: a step's calls stay together
            step.response = self._response_entry(reply.raw)
            rows = [step.response, *rows]
        if keep:
            self.unwritten.extend(rows)
            self.entries.extend(rows)
        elif len(rows) > 1 or self.unwritten:
            self._append_many(rows)
        else:
            self._append(rows[0])

    def _response_entry(self, raw: Any) -> Entry:
        return Entry(
            EntryKind.RESPONSE,
            self.step,
            self.rules.counters,
            content="the framework's whole response, as its own JSON",
            args={"response": raw},
        )

    def _budget_stop(self, action: Action, rows: Sequence[Entry]) -> None:
        reason = self.rules.before_tools(replace(action, kind=ActionKind.TOOL))
        if reason is None:
            return
        stop = Stop(reason)
        if action.kind is ActionKind.FINAL:
            self._finish(stop)  # a reply with no call: nothing to refuse
        else:
            refused = refused_entries(EntryKind.REFUSED, self.step, self.rules.counters, action)
            self._append_many(refused, stop)
        raise Stopped(stop)

    def _close_step(self, returned: Mapping[str, Outcome], retry: str | None) -> None:
        """Before the next request: journal what the last step's reply came to, and apply
        the rules that judge a step once its outcomes are in."""
        if self.step == 0:
            return
        step = self.steps.setdefault(self.step, StepRows())
        if self.pending_reply is not None:
            # The framework did not end on a reply with no call: it was not usable.
            _, reply = self.pending_reply
            self.pending_reply = None
            self._record_invalid(step, reply, retry)
        for call in step.actions:
            if call.kind is not EntryKind.ACTION or call.action_type is not ActionKind.TOOL:
                continue
            key = call.idempotency_key or ""
            found = step.outcomes.get(key)
            if found is not None:
                # The framework must show the model what the journal holds for the call (it
                # was handed that outcome), else it took another path: no such tool now, say.
                shown = returned.get(call.call_id or "")
                if shown is None or str(found.content) not in shown.content:
                    self._diverged(
                        f"call {key} ({call.tool}) of step {self.step} has a journaled outcome "
                        "that the agent does not show the model: "
                        + ("it shows none" if shown is None else repr(shown.content[:200]))
                    )
                continue
            # A call the framework answered itself (bad arguments, an unknown tool): its
            # answer, as the framework shows it to the model.
            outcome = returned.get(call.call_id or "")
            if outcome is None:
                self._diverged(
                    f"the agent asks for step {self.step + 1} with no outcome for call "
                    f"{key} ({call.tool}) of step {self.step}"
                )
            self._write_outcome(step, call, outcome.content, outcome.is_error, 1)
        if step.outcomes:
            before = step.actions[0].counters
            failed = all(entry.is_error for entry in step.outcomes.values())
            self.rules.counters = replace(
                self.rules.counters, error_streak=before.error_streak + 1 if failed else 0
            )
            last = replace(step.actions[0], counters=self.rules.counters)
            reason = self.rules.after_tools(last)
            if reason is not None:
                self._stop(Stop(reason))

    def _record_invalid(self, step: StepRows, reply: Reply, retry: str | None) -> None:
        call = reply.output_call
        action = Action(
            ActionKind.INVALID,
            tool=call.tool if call else None,
            args=call.args if call else None,
            call_id=call.id if call else None,
            raw=reply.text if call is None else None,
            error=retry or "the agent did not accept the reply",
            tokens=reply.tokens,
            cost=reply.cost,
        )
        entry = action_entry(EntryKind.ACTION, self.step, self.rules.counters, action)
        c = self.rules.counters
        counters = replace(c, error_streak=c.error_streak + 1)
        observed = observation_entry(entry, counters, f"InvalidAction: {action.error}", True, 1)
        step.actions = [entry]
        step.outcomes[""] = observed
        rows = [entry, observed]
        if reply.raw is not None:
            step.response = self._response_entry(reply.raw)
            rows.insert(0, step.response)
        self._append_many(rows)


def _tool_action(reply: Reply) -> Action:
    if len(reply.calls) == 1:
        call = reply.calls[0]
        return Action(
            ActionKind.TOOL,
            tool=call.tool,
            args=call.args,
            call_id=call.id,
            text=reply.text,
            tokens=reply.tokens,
            cost=reply.cost,
        )
    return Action(
        ActionKind.TOOL, text=reply.text, calls=reply.calls, tokens=reply.tokens, cost=reply.cost
    )


def _action_of_rows(rows: Sequence[Entry]) -> Action:
    first = rows[0]
    if first.action_type is not ActionKind.TOOL:
        return Action(ActionKind.INVALID, tokens=first.tokens, cost=first.cost)
    if len(rows) == 1:
        return Action(
            ActionKind.TOOL, tool=first.tool, args=first.args, tokens=first.tokens, cost=first.cost
        )
    calls = tuple(Call(row.tool or "", row.args or {}, row.call_id) for row in rows)
    return Action(ActionKind.TOOL, calls=calls, tokens=first.tokens, cost=first.cost)
