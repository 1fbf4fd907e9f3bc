"""Scores on runs: what a scorer is, what it is shown, and what it may return.

A scorer is a function of a finished run (`ScoredRun`) that returns a number: a float, an
int, a bool (1.0 or 0.0), or a `Score` (a value with a note saying why). Declared on an agent
(`Agent(..., scorers=[...])`), workers run each scorer once per run after the run ends
(runner.service.scoring); a person's score (`runner score`) is the same row with no scorer.

A model-judged scorer (`judge`) asks a model to grade the run: its call goes through the
same model callables and provider limits as a run's model calls (runner.core.limits).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runner.core.actions import ActionKind, parse_action
from runner.core.limits import NO_LIMITS, Limits, estimate_tokens, limit_of, max_tokens_of
from runner.errors import BadScore

# A score's name: what `runner stats` and the `run_scores` view group by.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,79}$")
# The longest note kept with a score (a judge's reasoning is cut there).
LONGEST_NOTE = 2000


@dataclass(frozen=True)
class Score:
    """A scorer's value with a note saying why (a judge's reasoning, a failed check)."""

    value: float
    note: str | None = None


@dataclass(frozen=True)
class ScoredRun:
    """What a scorer is shown of a finished run."""

    id: str
    task: str
    output: Any
    stop_reason: str | None
    agent_name: str | None
    release: str | None
    steps: int
    tokens: int
    cost: float
    transcript: list[dict[str, Any]] = field(default_factory=list)
    # Where a model-judged scorer's calls reserve and settle (the store's, for the fleet).
    limits: Limits = field(default=NO_LIMITS, repr=False, compare=False)


@dataclass(frozen=True)
class Scorer:
    """A named scorer: `fn(run)` returns a number, a bool or a `Score`."""

    name: str
    fn: Callable[[ScoredRun], Any]

    def __call__(self, run: ScoredRun) -> Score:
        return as_score(self.fn(run))


def as_scorers(declared: Iterable[Any] | None) -> dict[str, Scorer]:
    """An agent's scorers by name: `Scorer`s, or functions named by their `__name__` (or a
    `name` attribute). Two of one name, or an unusable one, is a ValueError."""
    found: dict[str, Scorer] = {}
    for item in declared or ():
        if isinstance(item, Scorer):
            scorer = item
        elif callable(item):
            name = getattr(item, "name", None) or getattr(item, "__name__", None)
            if not isinstance(name, str):
                raise ValueError(f"a scorer needs a name: {item!r} has none")
            scorer = Scorer(name, item)
        else:
            raise ValueError(f"a scorer must be callable, not {type(item).__name__}")
        check_name(scorer.name)
        if scorer.name in found:
            raise ValueError(f"two scorers are named {scorer.name!r}")
        found[scorer.name] = scorer
    return found


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadScore(
            f"a score's name is a letter or _ then up to 79 letters, digits or _.:-, not {name!r}"
        )
    return name


def check_value(value: object) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, int | float) or not math.isfinite(float(value)):
        raise BadScore(f"a score's value is a finite number, not {value!r}")
    return float(value)


def as_score(returned: Any) -> Score:
    """What a scorer returned, as a `Score` (BadScore for anything else)."""
    if isinstance(returned, Score):
        return Score(check_value(returned.value), cut_note(returned.note))
    return Score(check_value(returned))


def cut_note(note: str | None) -> str | None:
    if note is None:
        return None
    return note if len(note) <= LONGEST_NOTE else note[: LONGEST_NOTE - 1] + "…"


JUDGE_PROMPT = """Grade an AI agent's answer to its task.

{instructions}

Task:
{task}

The agent's answer (it stopped with: {stop_reason}):
{output}

Reply with the grade, a number from 0 to 1, on the first line, then one line saying why."""


def judge(
    model: Callable[[list[dict[str, Any]]], Any],
    instructions: str,
    *,
    name: str = "judge",
    limit: str | None = None,
) -> Scorer:
    """A scorer that asks `model` (any model callable: an adapter, a test model) to grade a
    run's answer from 0 to 1, following `instructions`.

    The model is shown one user message (JUDGE_PROMPT) and must answer with a final action
    whose first number is the grade; the rest of its answer is the score's note. Its call
    reserves from `limit` (or the model's own, an adapter's `provider/model`) and settles
    with the usage it reports, as a run's calls do: a judge waits for room in a limit
    rather than go over it.
    """
    check_name(name)
    drawn = limit_of(model, limit)

    def grade(run: ScoredRun) -> Score:
        prompt = JUDGE_PROMPT.format(
            instructions=instructions.strip(),
            task=run.task,
            stop_reason=run.stop_reason or "-",
            output="(no answer)" if run.output is None else run.output,
        )
        transcript = [{"role": "user", "content": prompt}]
        reservation = None
        if drawn is not None:
            reservation = run.limits.reserve(
                drawn, lambda: estimate_tokens(transcript, max_tokens_of(model))
            )
        output: Any = None
        try:
            output = model(transcript)
        finally:
            if reservation is not None:
                used = parse_action(output).tokens if output is not None else 0
                run.limits.settle(reservation, used)
        return judged(output)

    return Scorer(name, grade)


def judged(output: Any) -> Score:
    """The grade in a judge model's final answer: its first number, the rest its note."""
    action = parse_action(output)
    if action.kind is not ActionKind.FINAL:
        raise BadScore(f"the judge did not answer: {action.error or action.kind}")
    text = str(action.content).strip()
    found = re.search(r"-?\d+(?:\.\d+)?", text)
    if found is None:
        raise BadScore(f"the judge's answer has no grade: {text[:200]!r}")
    note = (text[: found.start()] + text[found.end() :]).strip(" \n:-") or None
    return Score(check_value(float(found.group())), cut_note(note))
