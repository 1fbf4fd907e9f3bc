"""Properties of the step machine over random models, tools and budgets."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from runner import StopReason, run_agent

Transcript = list[dict[str, Any]]

# -- random models and tools ----------------------------------------------------------------

USAGE = st.one_of(
    st.none(),  # no usage key at all
    st.integers(0, 6),
    st.floats(0, 4, allow_nan=False),
    st.fixed_dictionaries({"tokens": st.integers(0, 6), "cost": st.floats(0, 1.5)}),
    st.fixed_dictionaries({"cost": st.sampled_from([0.25, 0.5, 1.0])}),
    st.fixed_dictionaries({"input_tokens": st.integers(0, 3), "output_tokens": st.integers(0, 3)}),
    st.sampled_from([-1, "3", True, {"tokens": -2}, {"cost": float("nan")}]),  # bad usage
)
SMALL_ARGS = st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 2), max_size=2)
TOOL_NAMES = st.sampled_from(["ok", "ok", "fail", "falsy", "missing"])
MALFORMED = st.sampled_from(
    [
        "plain text",
        None,
        {},
        {"type": "answer"},
        {"type": "final"},
        {"type": "tool", "name": 3},
        {"type": "tool", "name": "ok", "args": [1]},
        {"type": "tool", "name": "ok", "args": {"x": float("nan")}},
        {"type": "tool", "name": "ok", "args": {"x": {1, 2}}},
    ]
)


def with_usage(output: dict[str, Any], usage: Any) -> dict[str, Any]:
    if usage is not None:
        output["usage"] = usage
    return output


FINALS = st.builds(
    lambda content, usage: with_usage({"type": "final", "content": content}, usage),
    st.text(max_size=3),
    USAGE,
)
CALLS = st.builds(
    lambda name, args, usage: with_usage({"type": "tool", "name": name, "args": args}, usage),
    TOOL_NAMES,
    SMALL_ARGS,
    USAGE,
)
# Mostly tool calls: a final ends the run, and the budgets are what is under test.
OUTPUTS = st.lists(st.one_of(*[CALLS] * 6, MALFORMED, MALFORMED, FINALS), max_size=10)


def tool_ok(**kwargs: Any) -> str:
    return f"ok {sorted(kwargs.items())}"


def tool_fail(**kwargs: Any) -> str:
    raise ValueError(f"failed on {sorted(kwargs.items())}")


def tool_falsy(**kwargs: Any) -> Any:
    return [None, "", 0][sum(kwargs.values()) % 3]


TOOLS = {"ok": tool_ok, "fail": tool_fail, "falsy": tool_falsy}


@dataclass
class Scripted:
    """Plays its outputs in order, then answers; counts its calls."""

    outputs: list[Any]
    calls: int = 0
    seen: list[int] = field(default_factory=list)

    def __call__(self, tr: Transcript) -> Any:
        self.calls += 1
        self.seen.append(len(tr))
        if self.calls <= len(self.outputs):
            return self.outputs[self.calls - 1]
        return {"type": "final", "content": "out of script"}


OPTIONAL = st.one_of(st.none(), st.integers(0, 3))


@st.composite
def budgets(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "max_steps": draw(st.integers(0, 7)),
        "max_tokens": draw(st.one_of(st.none(), st.integers(0, 25))),
        "max_consecutive_errors": draw(OPTIONAL),
        "max_repeats": draw(OPTIONAL),
        "max_cost": draw(st.one_of(st.none(), st.floats(0, 1.5))),
    }


# -- the invariants -------------------------------------------------------------------------

ACTION_KEYS = [{"role", "tool", "args"}, {"role", "invalid"}]
OBSERVATION_KEYS = {"role", "name", "content", "is_error"}


def check_transcript(r: Any, task: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The task, then action/observation pairs, then at most one final; returns the pairs."""
    tr = r.transcript
    assert tr[0] == {"role": "user", "content": task}
    actions: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = []
    i = 1
    while i < len(tr):
        message = tr[i]
        assert message["role"] == "assistant"
        if set(message) == {"role", "content"}:
            assert i == len(tr) - 1, "a final is the last message"
            assert r.stop_reason == StopReason.FINAL
            assert r.output is message["content"]
            break
        assert set(message) in ACTION_KEYS
        assert i + 1 < len(tr), "every action has its observation"
        observation = tr[i + 1]
        assert observation["role"] == "tool"
        assert set(observation) == OBSERVATION_KEYS
        assert isinstance(observation["content"], str)
        assert isinstance(observation["is_error"], bool)
        if "tool" in message:
            assert observation["name"] == message["tool"]
        else:
            assert observation["is_error"] is True
        actions.append(message)
        observations.append(observation)
        i += 2
    return actions, observations


def longest_error_run(observations: list[dict[str, Any]]) -> int:
    longest = run = 0
    for observation in observations:
        run = run + 1 if observation["is_error"] else 0
        longest = max(longest, run)
    return longest


@settings(max_examples=200, deadline=None)
@given(outputs=OUTPUTS, limits=budgets(), task=st.text(max_size=5))
def test_invariants_of_any_run(outputs: list[Any], limits: dict[str, Any], task: str) -> None:
    model = Scripted(outputs)
    r = run_agent(model, TOOLS, task, retry_backoff=0, **limits)
    event(f"stop: {r.stop_reason}")

    assert type(r.stop_reason) is StopReason
    assert r.stop_reason in {
        StopReason.FINAL,
        StopReason.MAX_STEPS,
        StopReason.TOKEN_BUDGET,
        StopReason.COST_BUDGET,
        StopReason.REPEATED_CALL,
        StopReason.TOOL_ERRORS,
    }
    assert 0 <= r.steps <= limits["max_steps"]
    assert model.calls == r.steps
    # The model saw the transcript grow by one pair each step.
    assert model.seen == [1 + 2 * n for n in range(r.steps)]

    max_tokens, max_cost = limits["max_tokens"], limits["max_cost"]
    over_tokens = max_tokens is not None and r.tokens > max_tokens
    over_cost = max_cost is not None and r.cost > max_cost
    assert over_tokens == (r.stop_reason == StopReason.TOKEN_BUDGET)
    assert over_cost == (r.stop_reason == StopReason.COST_BUDGET) or over_tokens

    actions, observations = check_transcript(r, task)
    shown = len(actions)
    if r.stop_reason in (StopReason.MAX_STEPS, StopReason.TOOL_ERRORS):
        assert shown == r.steps
    else:
        assert shown == r.steps - 1  # the last action was a final, or refused unseen
    if r.stop_reason == StopReason.MAX_STEPS:
        assert r.steps == limits["max_steps"]
    if r.stop_reason != StopReason.FINAL:
        assert r.output is None
    assert r.wrapped_up is False
    assert r.error is None

    limit = limits["max_consecutive_errors"]
    if r.stop_reason == StopReason.TOOL_ERRORS:
        assert limit is not None
        assert all(o["is_error"] for o in observations[-(limit + 1) :])
        assert longest_error_run(observations) == limit + 1
    elif limit is not None:
        assert longest_error_run(observations) <= limit

    repeats = Counter(
        (a["tool"], json.dumps(a["args"], sort_keys=True)) for a in actions if "tool" in a
    )
    if limits["max_repeats"] is not None:
        assert all(n <= limits["max_repeats"] for n in repeats.values())


# -- the same runs as seed 000's reference --------------------------------------------------


def seed_run_agent(
    model: Any,
    tools: Any,
    task: str,
    max_steps: int = 8,
    max_tokens: int = 10_000,
    max_consecutive_errors: int = 2,
    max_repeats: int = 2,
) -> tuple[str, Any, int, Transcript]:
    """Seed 000's solution, returning (stop_reason, output, steps, transcript)."""
    transcript: Transcript = [{"role": "user", "content": task}]
    tokens = 0
    error_streak = 0
    calls: Counter[tuple[str, str]] = Counter()
    for step in range(1, max_steps + 1):
        action = model(transcript)
        tokens += int(action.get("usage", 0))
        if tokens > max_tokens:
            return ("token_budget", None, step, transcript)
        if action["type"] == "final":
            transcript.append({"role": "assistant", "content": action["content"]})
            return ("final", action["content"], step, transcript)
        name, args = action["name"], action.get("args", {})
        signature = (name, json.dumps(args, sort_keys=True))
        calls[signature] += 1
        if calls[signature] > max_repeats:
            return ("repeated_call", None, step, transcript)
        transcript.append({"role": "assistant", "tool": name, "args": args})
        try:
            if name not in tools:
                raise LookupError(f"unknown tool {name}")
            observation, is_error = str(tools[name](**args)), False
        except Exception as e:
            observation, is_error = f"{type(e).__name__}: {e}", True
        transcript.append(
            {"role": "tool", "name": name, "content": observation, "is_error": is_error}
        )
        error_streak = error_streak + 1 if is_error else 0
        if error_streak > max_consecutive_errors:
            return ("tool_errors", None, step, transcript)
    return ("max_steps", None, max_steps, transcript)


SEED_USAGE = st.one_of(st.none(), st.integers(0, 6), st.floats(0, 4, allow_nan=False))
SEED_OUTPUTS = st.lists(
    st.one_of(
        st.builds(
            lambda name, args, usage: with_usage(
                {"type": "tool", "name": name, "args": args}, usage
            ),
            TOOL_NAMES,
            SMALL_ARGS,
            SEED_USAGE,
        ),
        st.builds(
            lambda content, usage: with_usage({"type": "final", "content": content}, usage),
            st.one_of(st.text(max_size=3), st.integers(), st.none()),
            SEED_USAGE,
        ),
    ),
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(
    outputs=SEED_OUTPUTS,
    max_steps=st.integers(0, 8),
    max_tokens=st.integers(0, 25),
    max_consecutive_errors=st.integers(0, 3),
    max_repeats=st.integers(0, 3),
)
def test_well_formed_runs_match_seed_000(
    outputs: list[Any],
    max_steps: int,
    max_tokens: int,
    max_consecutive_errors: int,
    max_repeats: int,
) -> None:
    limits = (max_steps, max_tokens, max_consecutive_errors, max_repeats)
    expected = seed_run_agent(Scripted(outputs), TOOLS, "task", *limits)
    r = run_agent(Scripted(outputs), TOOLS, "task", *limits)
    event(f"stop: {r.stop_reason}")
    assert (r.stop_reason, r.output, r.steps, r.transcript) == expected
