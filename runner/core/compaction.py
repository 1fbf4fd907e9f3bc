"""Compaction: a context policy that summarises a run's older steps with a model once what
the model is shown passes a token size, and keeps the latest steps verbatim.

The dropping policies (`runner.core.context`) are pure functions of the transcript. A
summary is not: it costs a model call, and a second call would give another text. So the
loop asks for it once and journals it as a `compaction` entry (the summary, what it covers,
what the call spent): a resume, a replay and a fork show the model the journaled summary
and never ask again. This module decides when to compact, what to summarise, what the
summary model is asked and what the run's model is then shown; `runner.core.loop` asks and
journals. The journal and the run's transcript keep every step whole.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.core.context import cut_observations
from runner.core.limits import CHARS_PER_TOKEN

Message = dict[str, Any]
Model = Callable[[list[Message]], Any]

INSTRUCTIONS = (
    "You are summarising the earlier part of a long conversation between a user, an "
    "assistant and its tools, so that the assistant can go on without it. Keep what the "
    "assistant needs: the task and its state, decisions made, facts found in tool results "
    "(names, numbers, identifiers, errors) and what remains to be done. Be concise. Reply "
    "with the summary as your final answer; do not call tools."
)
# How the model is shown a summary, in the summarised steps' place.
SUMMARY_NOTE = "[Summary of the first {steps} steps, which are left out here]\n{summary}"


@dataclass(frozen=True)
class Compaction:
    """An agent's `context=` that summarises older steps once the view passes a size.

    Before a model call, when what the model would be shown is more than `above_tokens`
    (estimated at four characters a token, as provider limits estimate), the steps before
    the latest `keep_steps` are summarised by `model` (None: the run's own model), together
    with the summary before them if there was one. The model is then shown the task, the
    summary, and the latest steps verbatim; a tool call is never separated from its result.
    The summary is journaled with what its call spent, which is charged to the run's
    budgets; a resumed, replayed or forked run reuses it. With `cut_observations`, tool
    results longer than that many characters are cut (as `runner.context.cut_observations`
    cuts them) in what the model is shown, in the size measured and in the summary's request.
    """

    above_tokens: int
    keep_steps: int = 4
    model: Model | None = None
    instructions: str = INSTRUCTIONS
    cut_observations: int | None = None

    def __post_init__(self) -> None:
        for name in ("above_tokens", "keep_steps", "cut_observations"):
            value = getattr(self, name)
            if value is None and name == "cut_observations":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Compaction needs a whole number {name} >= 0, not {value!r}")
        if self.model is not None and not callable(self.model):
            raise ValueError("Compaction's model must be callable")
        if not isinstance(self.instructions, str) or not self.instructions.strip():
            raise ValueError("Compaction's instructions must be text")

    def __call__(self, transcript: list[Message]) -> list[Message]:
        """The view before any summary is journaled: the transcript, its observations cut if
        asked. (The loop shows its runs the compacted view; this is what a caller outside
        it sees.)"""
        return self.shown(transcript)

    def shown(self, messages: list[Message]) -> list[Message]:
        """`messages` as the model is shown them (one for one: only observations are cut)."""
        if self.cut_observations is None:
            return list(messages)
        return cut_observations(self.cut_observations)(messages)


@dataclass(frozen=True)
class Due:
    """A compaction to make now: the transcript's messages [start, end) are summarised."""

    start: int
    end: int
    tokens: int  # the view's estimated tokens that made it due
    steps: int  # how many steps the new summary covers (those of the one before it too)


class Compacted:
    """One run's summaries as it goes: what the model is shown, and when the next is due.

    Each message's size is measured once, when it first enters the transcript (which the
    loop only appends to), so deciding costs no more at step 100 than at step 10."""

    def __init__(self, policy: Compaction) -> None:
        self.policy = policy
        self.summary: str | None = None
        self.end = 0  # the transcript's messages before this one (after the head) are summarised
        self.steps = 0  # how many of the model's steps the summary covers
        self._sizes: list[int] = []
        self._total = 0  # the sum of self._sizes
        self._head: int | None = None  # messages before the model's first one (the task)

    def view(self, transcript: list[Message]) -> list[Message]:
        """What the model is shown: the head, the summary, the steps after it."""
        shown = self.policy.shown
        if self.summary is None:
            return transcript if self.policy.cut_observations is None else shown(transcript)
        head = transcript[: self._head_of(transcript)]
        return [*shown(head), self.note(), *shown(transcript[self.end :])]

    def note(self) -> Message:
        return {
            "role": "user",
            "content": SUMMARY_NOTE.format(steps=self.steps, summary=self.summary),
        }

    def tokens(self, transcript: list[Message]) -> int:
        """The estimated tokens of what the model would be shown now."""
        self._measure(transcript)
        if self.summary is None:
            return math.ceil(self._total / CHARS_PER_TOKEN)
        head = self._head_of(transcript)
        shown = sum(self._sizes[:head]) + _size(self.note())
        shown += self._total - sum(self._sizes[: self.end])
        return math.ceil(shown / CHARS_PER_TOKEN)

    def due(self, transcript: list[Message]) -> Due | None:
        """The compaction to make before the next model call, if the view is too big and
        there are steps before the latest `keep_steps` not yet summarised."""
        tokens = self.tokens(transcript)
        if tokens <= self.policy.above_tokens:
            return None
        start = max(self.end, self._head_of(transcript))
        starts = [i for i in range(start, len(transcript)) if _opens_step(transcript[i])]
        keep = self.policy.keep_steps
        if len(starts) <= keep:
            return None
        end = starts[-keep] if keep else len(transcript)
        return Due(start, end, tokens, self.steps + len(starts) - keep)

    def request(self, transcript: list[Message], due: Due) -> list[Message]:
        """The summary model's one message: the instructions, the task, the summary so far
        and the steps to fold into it, as text."""
        head = transcript[: self._head_of(transcript)]
        parts = [self.policy.instructions, "", "The conversation so far:"]
        parts.extend(_line(message) for message in self.policy.shown(head))
        if self.summary is not None:
            parts.append(f"[Summary of the first {self.steps} steps]\n{self.summary}")
        steps = self.policy.shown(transcript[due.start : due.end])
        parts.extend(_line(message) for message in steps)
        return [{"role": "user", "content": "\n".join(parts)}]

    def apply(self, args: dict[str, Any] | None, summary: Any) -> None:
        """Take up a journaled summary (`args` as `record` made them)."""
        args = args or {}
        self.summary = str(summary)
        self.end = int(args.get("end", 0))
        self.steps = int(args.get("steps", 0))

    @staticmethod
    def record(due: Due) -> dict[str, Any]:
        """What a compaction entry's `args` hold."""
        return {"end": due.end, "steps": due.steps, "tokens_before": due.tokens}

    def _measure(self, transcript: Sequence[Message]) -> None:
        for message in self.policy.shown(list(transcript[len(self._sizes) :])):
            size = _size(message)
            self._sizes.append(size)
            self._total += size

    def _head_of(self, transcript: Sequence[Message]) -> int:
        if self._head is not None:
            return self._head
        for i, message in enumerate(transcript):
            if _opens_step(message):
                self._head = i  # fixed once the model has spoken
                return i
        return len(transcript)


def _opens_step(message: Message) -> bool:
    return message.get("role") == "assistant"


def _size(message: Message) -> int:
    return len(json.dumps(message, default=str, ensure_ascii=False))


def _line(message: Message) -> str:
    """One message as a line of the summary model's text."""
    role = message.get("role")
    if role == "tool":
        what = "error" if message.get("is_error") else "result"
        return f"[{message.get('name')} {what}] {message.get('content')}"
    if role == "assistant":
        calls = message.get("calls") or (
            [{"name": message["tool"], "args": message.get("args")}] if "tool" in message else []
        )
        said = [message[key] for key in ("text", "content", "invalid") if message.get(key)]
        done = [f"called {c.get('name')}({json.dumps(c.get('args'), default=str)})" for c in calls]
        return "[assistant] " + "; ".join([*map(str, said), *done])
    return f"[{role}] {message.get('content')}"
