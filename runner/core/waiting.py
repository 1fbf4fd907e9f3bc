"""Calls that wait for a person: what they ask, how they are answered, what the model sees.

A call that needs an answer is journaled as a `wait` entry after its step's actions, in the
commit that moves the run to `waiting` (one per such call of the step, in call order); each
person's answer is an `answer` entry after them, in the order the answers come. This module
holds the words for both and knows no SQL: the store writes them
(`runner.approvals`), the loop reads them back on resume.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind


class Asks(StrEnum):
    """What a waiting call needs, as stored in `entries.waits_for`."""

    APPROVAL = "approval"  # a tool declared with `approval`: yes (approve) or no (deny)
    REPLY = "reply"  # `ask_human`: a person's reply becomes the observation
    # A sub-agent's call (`Agent.as_tool`): the child run's end is the answer, delivered by
    # the runner, never by a person; its answer or why it stopped becomes the observation.
    CHILD = "child"


def waited_for(asks: Iterable[str | None]) -> tuple[str, ...]:
    """What a run whose calls ask `asks` waits for, in RunWaiting's words: `sub-agents` (their
    ends), `answer` (a person's), or both."""
    return tuple(sorted({"sub-agents" if ask == Asks.CHILD else "answer" for ask in asks}))


class Answer(StrEnum):
    """How a wait was answered, as stored in `entries.answer`."""

    APPROVED = "approved"  # the call runs, with its idempotency key, as any call
    DENIED = "denied"  # the call never runs: the model is shown `Denied: <reason>`
    REPLIED = "replied"  # ask_human's observation is the reply
    TIMED_OUT = "timed_out"  # nobody answered within approval_timeout: denied, saying so
    ENDED = "ended"  # the child run a sub-agent's call started ended (Asks.CHILD)


DENIED_PREFIX = "Denied: "


def observation_of(answer: Answer, text: str | None) -> tuple[str, bool] | None:
    """What the model is shown for an answered call that does not run: (content, is_error).

    None for an approval: the tool runs and its result is the observation. A denial is an
    error observation (the call did not do what the model asked, and counts towards the
    error streak like any failed call); a reply is not.
    """
    if answer is Answer.APPROVED:
        return None
    if answer is Answer.REPLIED:
        return (text or "", False)
    return (DENIED_PREFIX + (text or "no reason given"), True)


def decides_alone(answer: Answer) -> bool:
    """Whether a call's outcome is its answer alone, no tool run: a child run's end, a
    denial, a reply, a timeout (not an approval, after which the tool runs)."""
    return answer is not Answer.APPROVED


def timed_out_reason(seconds: float) -> str:
    """The reason journaled when approval_timeout passes: the model reads it as a denial."""
    return f"no answer within {seconds:g}s"


def wait_entry(action: Entry, asks: Asks, counters: Counters) -> Entry:
    """The `wait` entry of a call (its action entry) that needs `asks` before it runs."""
    assert action.tool is not None
    return Entry(
        EntryKind.WAIT,
        action.step,
        counters,
        content=question_of(action.tool, action.args, asks),
        tool=action.tool,
        args=action.args,
        idempotency_key=action.idempotency_key,
        waits_for=asks,
    )


def question_of(tool: str, args: dict[str, Any] | None, asks: Asks) -> str:
    """What a person is asked, in one line: the question itself, or the call to approve."""
    if asks is Asks.REPLY:
        question = (args or {}).get("question")
        if isinstance(question, str) and question.strip():
            return question
    return f"{tool}({call_args(args)})"


def call_args(args: dict[str, Any] | None) -> str:
    """A call's arguments as a person reads them: `amount=250, order="A-1"`."""
    return ", ".join(f"{name}={json.dumps(value)}" for name, value in (args or {}).items())


@dataclass(frozen=True)
class Wait:
    """What a waiting run waits for: one call, and the kind of answer it needs (a step of
    several calls may wait for several: one Wait each)."""

    run_id: str
    step: int
    call: str  # the call's idempotency key: `runner approve ID --call KEY`
    tool: str
    args: dict[str, Any]
    asks: Asks
    question: str  # the ask_human question, or the call as a person reads it
    since: datetime  # when the run began to wait (UTC)
    expires_at: datetime | None = None  # when approval_timeout denies it, if it is set


@dataclass(frozen=True)
class Answered:
    """An answer that was recorded: exactly one per wait, whoever raced for it."""

    run_id: str
    call: str
    answer: Answer
    by: str | None  # who answered (None for a timeout)
    at: datetime
    text: str | None  # the note, the reason, the reply
    # The calls of the same step still waiting for their answers (the run is queued again
    # only once none is left): a step of several calls waits for every answer it needs.
    still_waiting: tuple[str, ...] = ()
