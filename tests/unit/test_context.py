"""`context=`: what the model is shown, applied on every model call and never to the journal."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner import Agent, run_agent
from runner.core.context import compose, cut_observations, last_steps
from runner.core.journal import MemoryJournal
from runner.core.loop import drive

Transcript = list[dict[str, Any]]

TASK = {"role": "user", "content": "task"}


def call(n: int) -> dict[str, Any]:
    return {"role": "assistant", "tool": "search", "args": {"q": n}}


def seen(n: int, content: str = "") -> dict[str, Any]:
    return {"role": "tool", "name": "search", "content": content or f"r{n}", "is_error": False}


def transcript_of(steps: int) -> Transcript:
    messages: Transcript = [TASK]
    for n in range(1, steps + 1):
        messages += [call(n), seen(n)]
    return messages


# -- last_steps -------------------------------------------------------------------------------


def test_last_steps_keeps_the_task_a_note_and_the_last_calls_with_their_observations() -> None:
    shown = last_steps(2)(transcript_of(5))
    assert shown == [
        TASK,
        {"role": "user", "content": "[3 earlier steps left out here]"},
        call(4),
        seen(4),
        call(5),
        seen(5),
    ]


def test_last_steps_without_a_note_and_with_nothing_to_drop() -> None:
    assert last_steps(1, note=False)(transcript_of(2)) == [TASK, call(2), seen(2)]
    whole = transcript_of(2)
    assert last_steps(2)(whole) == whole
    assert last_steps(0)(whole) == [
        TASK,
        {"role": "user", "content": "[2 earlier steps left out here]"},
    ]
    assert last_steps(1)(transcript_of(2))[1]["content"] == "[1 earlier step left out here]"


def test_a_malformed_output_and_a_wrap_up_note_stay_with_their_step() -> None:
    invalid = {"role": "assistant", "invalid": "'oops'"}
    error = {"role": "tool", "name": None, "content": "InvalidAction: x", "is_error": True}
    note = {"role": "user", "content": "Your max_steps budget is spent."}
    transcript = [TASK, call(1), seen(1), invalid, error, note]
    assert last_steps(1, note=False)(transcript) == [TASK, invalid, error, note]


def step_lists() -> st.SearchStrategy[Transcript]:
    """Transcripts the loop could make: steps of one call and its observation, or malformed."""
    step = st.one_of(
        st.integers(0, 9).map(lambda n: [call(n), seen(n)]),
        st.just(
            [
                {"role": "assistant", "invalid": "1"},
                {"role": "tool", "name": None, "content": "InvalidAction: y", "is_error": True},
            ]
        ),
    )
    return st.lists(step, max_size=12).map(lambda steps: [TASK] + [m for s in steps for m in s])


@given(step_lists(), st.integers(0, 14))
def test_last_steps_never_splits_a_call_from_its_observation(
    transcript: Transcript, n: int
) -> None:
    before = copy.deepcopy(transcript)
    shown = last_steps(n, note=False)(transcript)
    assert transcript == before  # the journal's transcript is never touched
    assert shown[0] == TASK
    body = shown[1:]
    assert len([m for m in body if m["role"] == "assistant"]) == min(n, (len(transcript) - 1) // 2)
    for i, message in enumerate(body):
        # Every message of the model is followed by the observation that answered it.
        if message["role"] == "assistant":
            assert body[i + 1]["role"] == "tool"
    assert body == transcript[len(transcript) - len(body) :]


def test_last_steps_rejects_a_negative_count() -> None:
    with pytest.raises(ValueError, match="last_steps"):
        last_steps(-1)
    with pytest.raises(ValueError, match="last_steps"):
        last_steps(True)


# -- cut_observations -------------------------------------------------------------------------


def test_long_observations_are_cut_with_a_marker_and_others_kept() -> None:
    transcript = [TASK, call(1), seen(1, "x" * 30), call(2), seen(2, "short")]
    before = copy.deepcopy(transcript)
    shown = cut_observations(10)(transcript)
    assert shown[2]["content"] == "xxxxxxxxxx[... 20 characters cut]"
    assert shown[4]["content"] == "short"
    assert shown[:2] == transcript[:2]
    assert transcript == before


def test_only_observations_are_cut() -> None:
    long_task = {"role": "user", "content": "y" * 50}
    assert cut_observations(5)([long_task]) == [long_task]


def test_composed_contexts_apply_in_order() -> None:
    both = compose(last_steps(1, note=False), cut_observations(3))
    assert both([TASK, call(1), seen(1, "abcdef"), call(2), seen(2, "ghijkl")]) == [
        TASK,
        call(2),
        {**seen(2), "content": "ghi[... 3 characters cut]"},
    ]


# -- wiring: the loop, run_agent, Agent -------------------------------------------------------


def echo(q: object) -> str:
    return f"r{q}"


def searcher(shown: list[Transcript]) -> Any:
    def model(transcript: Transcript) -> dict[str, Any]:
        shown.append(copy.deepcopy(transcript))
        if len(shown) == 4:
            return {"type": "final", "content": "done"}
        return {"type": "tool", "name": "search", "args": {"q": len(shown)}}

    return model


def test_run_agent_shows_the_model_the_context_and_keeps_the_whole_transcript() -> None:
    shown: list[Transcript] = []
    result = run_agent(
        searcher(shown), {"search": lambda q: f"r{q}" * 10}, "task", context=last_steps(1)
    )
    assert result.stop_reason == "final"
    assert len(result.transcript) == 1 + 3 * 2 + 1  # task, three steps, the answer
    assert shown[0] == [TASK]
    assert shown[3] == [
        TASK,
        {"role": "user", "content": "[2 earlier steps left out here]"},
        {"role": "assistant", "tool": "search", "args": {"q": 3}},
        {"role": "tool", "name": "search", "content": "r3" * 10, "is_error": False},
    ]


def test_the_wrap_up_call_is_shown_the_context_too() -> None:
    shown: list[Transcript] = []

    def model(transcript: Transcript) -> dict[str, Any]:
        shown.append(transcript)
        if "budget is spent" in str(transcript[-1]["content"]):
            return {"type": "final", "content": "best guess"}
        return {"type": "tool", "name": "search", "args": {"q": len(shown)}}

    result = run_agent(
        model,
        {"search": echo},
        "task",
        max_steps=3,
        wrap_up=True,
        context=last_steps(1, note=False),
    )
    assert (result.stop_reason, result.output, result.wrapped_up) == (
        "max_steps",
        "best guess",
        True,
    )
    assert [m["role"] for m in shown[-1]] == ["user", "assistant", "tool", "user"]


def test_a_failing_context_stops_the_run_as_a_model_error_at_once() -> None:
    calls: list[Transcript] = []

    def broken(transcript: Transcript) -> Transcript:
        raise KeyError("content")

    result = run_agent(calls.append, {}, "task", context=broken, model_retries=3)
    assert result.stop_reason == "model_error"
    assert result.error == "context: KeyError: 'content'"
    assert calls == []


def test_agent_keeps_its_context_and_drive_applies_it() -> None:
    def keep_task(transcript: Transcript) -> Transcript:
        return transcript[:1]

    shown: list[Transcript] = []
    agent = Agent(searcher(shown), {"search": echo}, context=keep_task)
    assert agent.context is keep_task
    result = drive(
        agent.model, agent.tools, "task", agent.budgets, MemoryJournal(), context=agent.context
    )
    assert result.stop_reason == "final"
    assert shown == [[TASK]] * 4


def test_agent_rejects_a_context_that_is_not_callable() -> None:
    with pytest.raises(ValueError, match="context must be callable"):
        Agent(lambda t: None, context="last 3")  # type: ignore[arg-type]
