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

One model request is one step. A response with function tool calls records them (one row per
call, keys `<run>-<step>` or `<run>-<step>.<n>`) before any runs; each outcome is recorded as
its call ends. A response with no call waits in memory: it becomes the run's `final` if the
framework ends on it, or an `invalid` action (with the framework's complaint as its
observation) when the framework asks again instead. The stop rules are runner's, applied
where its loop applies them: before a request (cancel, time, steps, tree), after a response
(tokens, cost, repeats) and once a step's outcomes are in (the error streak, the step cap).

A response whose parts the reply does not say (thinking with its signature, reasoning, the
provider's ids of its items) keeps the framework's own JSON of it in a `response` entry, in the
commit of the step's action and before it: on resume the framework is handed the very parts it
first got, so what it sends the provider next is what an uninterrupted run sends.

While a live request streams, its pieces go to the run's followers (runner.core.deltas) as a
runner model's do: `ask` hands the request the call's `DeltaStream`, and `Pieces` numbers what
the framework's stream events carry. The journal still records the complete response once.

Framework glue (`runner.integrations`) turns its messages into `Reply` and back; this module
knows no framework, no SQL and no provider.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from runner.core.actions import Action, ActionKind, Call, parse_action
from runner.core.budgets import Budgets
from runner.core.calls import CallTimedOut, described, invoke, on_shared_loop, watched
from runner.core.clock import SYSTEM, Clock
from runner.core.counters import Counters
from runner.core.deltas import DeltaSink, DeltaStream, current_stream
from runner.core.interrupts import CallInterrupted, checking
from runner.core.journal import Entry, EntryKind, Journal, Stop, transcript_of
from runner.core.limits import NO_LIMITS, Draw, Limits, limit_wait_entry
from runner.core.listings import listings_change, listings_entry
from runner.core.model_call import (
    Cancel,
    CancelledInFlight,
    ModelCall,
    ModelFailed,
    ModelTimedOut,
    OutOfTime,
)
from runner.core.result import AgentResult
from runner.core.spans import NO_SPANS, Spans
from runner.core.steps import action_entry, call_entries, observation_entry, refused_entries
from runner.core.stop_reasons import StopReason
from runner.core.stop_rules import StopRules
from runner.core.tool_runs import ToolRuns
from runner.core.tools import Tool
from runner.core.tree import ChildRun, Place, child_run_id, spawn_budgets
from runner.core.waiting import Answer, Asks, observation_of, wait_entry
from runner.errors import ModelFatal, ReplayMismatch, RunPaused, RunWaiting


@dataclass(frozen=True)
class Reply:
    """One model response, as the journal keeps it: what the model said, the function tool
    calls it asked for, and, when it answered through an output tool instead of text, that
    call (`output_call`: the framework's way of ending)."""

    text: str | None = None
    calls: tuple[Call, ...] = ()
    output_call: Call | None = None
    tokens: int = 0
    cost: float = 0.0
    # The framework's own JSON of the whole response, when it holds parts the fields above do
    # not say (journaled in a `response` entry and handed back as it was on replay).
    raw: Any = None


@dataclass(frozen=True)
class Outcome:
    """A tool call's outcome as recorded: its text, and whether it failed."""

    content: str
    is_error: bool


class Stopped(Exception):
    """The run must stop here (a budget, a cancel, a divergence): raised through the
    framework's code to the driver, which returns the run's result."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(f"{stop.reason}: {stop.error}" if stop.error else str(stop.reason))
        self.stop = stop


# What a framework's live request returns to `ForeignRun.ask`: the reply in runner's terms
# and whatever the framework needs back (its own response object), handed on untouched.
LiveReply = tuple[Reply, Any]


class Pieces:
    """A streamed response's pieces on their way to the run's followers: its text, and each
    tool call's arguments, the calls numbered from 0 in the order they first appear (the
    framework names them by its own key: a part's index, an output item's)."""

    def __init__(self, stream: DeltaStream) -> None:
        self.stream = stream
        self.calls: dict[Any, int] = {}
        self.tools: dict[Any, str] = {}  # each call's tool, once a piece named it

    def text(self, text: str) -> None:
        self.stream.emit(text)

    def arguments(self, key: Any, text: str, tool: str | None = None) -> None:
        call = self.calls.setdefault(key, len(self.calls))
        if tool:
            self.tools.setdefault(key, tool)
        self.stream.emit(text, part="arguments", call=call, tool=self.tools.get(key))


@dataclass
class _Step:
    """The rows of one step, recorded or written by this process."""

    actions: list[Entry] = field(default_factory=list)  # tool calls (or one invalid/final)
    outcomes: dict[str, Entry] = field(default_factory=dict)  # by call key
    waits: dict[str, Entry] = field(default_factory=dict)
    answers: dict[str, Entry] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    messages: list[Entry] = field(default_factory=list)  # sent to the run (`runner send`)
    response: Entry | None = None  # the framework's own JSON of the step's response, if kept
    recorded: bool = False  # its action came from the journal (a previous process)

    def call(self, call_id: str) -> Entry | None:
        for entry in self.actions:
            if entry.call_id == call_id and entry.kind is EntryKind.ACTION:
                return entry
        return None


class ForeignRun:
    """One run of a framework's loop, journaled. Thread-safe: a framework may call its tools
    at once (each outcome is written one at a time, under a lock)."""

    def __init__(
        self,
        tools: Mapping[str, Tool],
        task: str,
        budgets: Budgets,
        journal: Journal,
        *,
        deadline: float | None = None,
        cancel: Cancel | None = None,
        pause: threading.Event | None = None,
        clock: Clock = SYSTEM,
        spans: Spans = NO_SPANS,
        limit: str | None = None,
        limits: Limits = NO_LIMITS,
        deltas: DeltaSink | None = None,
    ) -> None:
        self.tools = tools  # each tool's declaration (idempotent, reconcile, ...), by name
        self.task = task
        self.journal = journal
        self.rules = StopRules(budgets)
        self.spans = spans
        self.writing = threading.Lock()
        self.entries: list[Entry] = []  # every entry of the run, recorded then written
        # Entries kept for the run's next write (its task; a step's calls, until the first
        # of them runs): committed in its commit, before its own rows.
        self.unwritten: list[Entry] = []
        self.steps: dict[int, _Step] = {}
        self.step = 0  # the step of the framework's last model request
        self.pending_reply: tuple[int, Reply] | None = None  # a reply with no call, unjudged
        draw = None
        if limit is not None:
            draw = Draw(limits, limit, None, waited=self._limit_waited)
        self.model_call = ModelCall(
            _no_model,
            journal,
            deadline=deadline,
            cancel=cancel,
            pause=pause,
            clock=clock,
            context=None,
            spans=spans,
            deltas=deltas,
            draw=draw,
        )
        self.task_recorded = False
        self.listings: Entry | None = None  # the tool listings the run started with
        self.listings_checked = False
        self.last_recorded = 0  # the last step the journal holds an action of
        self._index(journal.recorded())
        self.place = journal.place() if hasattr(journal, "place") else Place()

    # -- what the journal holds -------------------------------------------------------------

    def _index(self, recorded: Sequence[Entry]) -> None:
        for entry in recorded:
            self.entries.append(entry)
            if entry.kind is EntryKind.TASK:
                self.task_recorded = True
                continue
            if entry.kind is EntryKind.TOOLS:
                self.listings = entry
                continue
            step = self.steps.setdefault(entry.step, _Step(recorded=True))
            key = entry.idempotency_key or ""
            if entry.kind in (EntryKind.ACTION, EntryKind.FINAL, EntryKind.REFUSED):
                step.actions.append(entry)
                self.last_recorded = max(self.last_recorded, entry.step)
            elif entry.kind is EntryKind.OBSERVATION:
                step.outcomes[key] = entry
            elif entry.kind is EntryKind.WAIT:
                step.waits[key] = entry
            elif entry.kind is EntryKind.ANSWER:
                step.answers[key] = entry
            elif entry.kind is EntryKind.START:
                step.started.add(key)
            elif entry.kind is EntryKind.MESSAGE:
                step.messages.append(entry)
            elif entry.kind is EntryKind.RESPONSE:
                step.response = entry

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

    # -- model requests ---------------------------------------------------------------------

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
        step = self.steps.setdefault(self.step, _Step())
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
        step = self.steps.setdefault(self.step, _Step())
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
        step = self.steps.setdefault(self.step, _Step())
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

    def _record_invalid(self, step: _Step, reply: Reply, retry: str | None) -> None:
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

    # -- tool calls ---------------------------------------------------------------------------

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
        self, step: _Step, call: Entry, sub: Any, task: str | None = None
    ) -> NoReturn:
        """A sub-agent's call: start its child run (its id derived from the call's key, so a
        crash re-attaches to it) under what this run has left, and park until it ends."""
        key = call.idempotency_key or ""
        if key not in step.waits:
            task = task or (call.args or {}).get("task")
            budgets = spawn_budgets(
                sub.budgets, self.rules.budgets, self.rules.spent(), self.model_call.remaining()
            )
            child = ChildRun(
                id=child_run_id(self.journal.run_id, key),
                parent_id=self.journal.run_id,
                call_key=key,
                agent=sub.agent.reference(),
                agent_name=sub.agent.name,
                release=sub.agent.release,
                task=task if isinstance(task, str) else json.dumps(call.args),
                budgets=budgets.as_dict(),
            )
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
        )

    def _write_outcome(
        self, step: _Step, call: Entry, content: str, is_error: bool, attempt: int
    ) -> Entry:
        with self.writing:
            key = call.idempotency_key or ""
            c = self.rules.counters
            before = call.counters.error_streak
            # A step is a failed step only if every one of its calls failed.
            failed = is_error and all(e.is_error for e in step.outcomes.values())
            streak = before + 1 if failed else 0
            counters = Counters(steps=c.steps, tokens=c.tokens, cost=c.cost, error_streak=streak)
            entry = observation_entry(call, counters, content, is_error, attempt)
            self._append(entry)
            step.outcomes[key] = entry
            return entry

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
        raise RunWaiting(f"run {self.journal.run_id} waits for {asked}", run_id=self.journal.run_id)

    # -- the end ----------------------------------------------------------------------------

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
        step = self.steps.setdefault(self.step, _Step())
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

    # -- writing ----------------------------------------------------------------------------

    def _append(self, entry: Entry, stop: Stop | None = None) -> None:
        if self.unwritten:
            self._append_many([entry], stop)
            return
        self.journal.append(entry, stop)
        self.entries.append(entry)

    def _append_many(self, entries: Sequence[Entry], stop: Stop | None = None) -> None:
        kept, self.unwritten = self.unwritten, []
        self.journal.append_many([*kept, *entries], stop)
        self.entries.extend(entries)

    def _flush(self) -> None:
        """Write what was kept for the run's next write, alone: a write of another shape
        (a wait, the run's end, messages) comes next."""
        if self.unwritten:
            kept, self.unwritten = self.unwritten, []
            self.journal.append_many(kept)

    def _finish(self, stop: Stop) -> None:
        self._flush()
        self.journal.finish(stop, self.rules.counters)

    def _stop(self, stop: Stop) -> NoReturn:
        self._finish(stop)
        raise Stopped(stop)

    def _diverged(self, why: str) -> NoReturn:
        """The framework asks for what the journal does not hold here: stop, saying so."""
        stop = Stop(StopReason.DIVERGED, error=f"diverged from the journal: {why}")
        self._finish(stop)
        raise Stopped(stop) from ReplayMismatch(why, step=self.step)

    def _limit_waited(self, reservation: Any) -> None:
        self._append(limit_wait_entry(self.rules.counters, reservation))


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


def _no_model(_shown: Any) -> Any:
    raise AssertionError("a framework's request is made through ForeignRun.ask")


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


def idempotent_said(names: Iterable[str] | Mapping[str, bool]) -> dict[str, bool]:
    """A RunnerAgent's `idempotent=`: tool names (each True), or names to True or False."""
    if isinstance(names, Mapping):
        return {str(name): bool(said) for name, said in names.items()}
    if isinstance(names, str):
        raise ValueError(f"idempotent is a collection of tool names, not the string {names!r}")
    return dict.fromkeys(names, True)
