"""What the model is shown: functions from the transcript to the messages a model call gets.

An agent's `context=` is applied to every model call and never to the journal: the run
keeps everything, the model sees a view of it. The functions here return new lists (and
new dicts for messages they change) and never touch the transcript they are given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Message = dict[str, Any]
Context = Callable[[list[Message]], list[Message]]


def last_steps(n: int, *, note: bool = True) -> Context:
    """Keep the task and the last `n` steps (a step: the model's message and what answered it).

    A tool call is never separated from its observation. With `note`, a user message saying
    how many steps were left out follows the task, so the model knows the view is partial.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"last_steps needs a whole number of steps >= 0, not {n!r}")

    def keep(transcript: list[Message]) -> list[Message]:
        head, steps = _split_steps(transcript)
        dropped = len(steps) - n
        if dropped <= 0:
            return list(transcript)
        kept = [message for step in steps[dropped:] for message in step]
        marker: list[Message] = []
        if note:
            noun = "step" if dropped == 1 else "steps"
            marker = [{"role": "user", "content": f"[{dropped} earlier {noun} left out here]"}]
        return [*head, *marker, *kept]

    return keep


def cut_observations(limit: int) -> Context:
    """Cut every tool observation longer than `limit` characters, saying how much was cut."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"cut_observations needs a whole number of characters >= 0, not {limit!r}")

    def cut(transcript: list[Message]) -> list[Message]:
        shown: list[Message] = []
        for message in transcript:
            content = message.get("content")
            if message.get("role") == "tool" and isinstance(content, str) and len(content) > limit:
                left = len(content) - limit
                message = {**message, "content": f"{content[:limit]}[... {left} characters cut]"}
            shown.append(message)
        return shown

    return cut


def compose(*contexts: Context) -> Context:
    """One context function applying `contexts` in order (the first sees the transcript)."""

    def apply(transcript: list[Message]) -> list[Message]:
        shown = list(transcript)
        for context in contexts:
            shown = context(shown)
        return shown

    return apply


def _split_steps(transcript: list[Message]) -> tuple[list[Message], list[list[Message]]]:
    """The messages before the model's first one (the task), and one list per step."""
    head: list[Message] = []
    steps: list[list[Message]] = []
    for message in transcript:
        if message.get("role") == "assistant":
            steps.append([message])
        elif steps:
            # Observations, and notes the runner adds, belong to the step they follow.
            steps[-1].append(message)
        else:
            head.append(message)
    return head, steps
