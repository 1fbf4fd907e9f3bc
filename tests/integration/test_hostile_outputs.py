"""Whatever the model returns, a durable run ends finished with a recorded reason: a value the
journal cannot keep exactly is refused at parse time with an InvalidAction that says why,
counters never overflow a column, and the journal gives back what the run saw."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import Agent, Runner, run_agent
from runner.core.actions import MAX_NESTING

from .support import TOOLS, Transcript

_ids = itertools.count()


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


class Raises:
    """A model whose first call raises with a hostile message, then answers."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.calls = 0

    def __call__(self, transcript: Transcript) -> Any:
        self.calls += 1
        raise RuntimeError(self.message)


def once(first: Any) -> Callable[[Transcript], Any]:
    """A model that returns `first`, then answers "done" once it has seen an observation."""

    def model(transcript: Transcript) -> Any:
        if len(transcript) == 1:
            return first
        return {"type": "final", "content": "done"}

    return model


HOSTILE: list[tuple[str, Any, str]] = [
    ("long tool name", {"type": "tool", "name": "t" * 201, "args": {}}, "at most 200"),
    ("NUL in tool name", {"type": "tool", "name": "se\x00arch", "args": {}}, "NUL"),
    ("surrogate in tool name", {"type": "tool", "name": "se\ud800arch", "args": {}}, "surrogate"),
    (
        "args nested 2000 deep",
        {"type": "tool", "name": "search", "args": {"q": nested(2000)}},
        "nested too deeply",
    ),
    ("final nested 2000 deep", {"type": "final", "content": nested(2000)}, "nested too deeply"),
    ("final object()", {"type": "final", "content": object()}, "text or JSON"),
    ("final bytes", {"type": "final", "content": b"\x00\xff"}, "text or JSON"),
]


@pytest.mark.parametrize(("name", "output", "why"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_action_is_an_invalid_action_the_model_sees(
    db_url: str, name: str, output: Any, why: str
) -> None:
    with Runner(db_url) as runner:
        result = runner.run(Agent(once(output), TOOLS), "t", id=f"h{next(_ids)}")
        stored = runner.get(result.run_id or "")
    assert (result.stop_reason, result.output) == ("final", "done")
    error = result.transcript[2]
    assert error["role"] == "tool" and error["is_error"] is True
    assert error["content"].startswith("InvalidAction:") and why in error["content"]
    assert stored.transcript == result.transcript  # the journal gives back what the run saw
    assert (stored.stop_reason, stored.status) == ("final", "finished")


@pytest.mark.parametrize(
    "usage",
    [2**31, 2**63, 2**64 + 7, 1e300, 10**400],
    ids=["2**31", "2**63", "2**64+7", "1e300", "10**400"],
)
def test_any_usage_is_a_token_budget_stop_that_is_recorded(db_url: str, usage: Any) -> None:
    model = once({"type": "final", "content": "x", "usage": usage})
    with Runner(db_url) as runner:
        result = runner.run(Agent(model, TOOLS), "t", id=f"u{next(_ids)}")
        row = runner.row(result.run_id or "")
    memory = run_agent(model, TOOLS, "t")
    assert result.stop_reason == memory.stop_reason == "token_budget"
    assert result.tokens == memory.tokens == int(usage)
    assert (row.status, row.stop_reason) == ("finished", "token_budget")
    assert row.tokens == min(int(usage), 2**63 - 1)  # the column saturates, never overflows


@pytest.mark.parametrize("usage", [2**31, 2**62], ids=["2**31", "2**62"])
def test_large_usage_under_an_unlimited_budget_is_counted(db_url: str, usage: int) -> None:
    model = once({"type": "tool", "name": "search", "args": {"q": 1}, "usage": usage})
    with Runner(db_url) as runner:
        result = runner.run(Agent(model, TOOLS, max_tokens=None), "t", id=f"v{next(_ids)}")
        stored = runner.get(result.run_id or "")
    assert (result.stop_reason, result.tokens) == ("final", usage)
    assert stored.tokens == usage


@pytest.mark.parametrize(
    "message",
    ["bad\x00gateway", "bad\ud800gateway", "bad" + "x" * 100_000],
    ids=["NUL", "surrogate", "long"],
)
def test_a_model_error_with_hostile_text_is_recorded(db_url: str, message: str) -> None:
    with Runner(db_url) as runner:
        result = runner.run(
            Agent(Raises(message), TOOLS, model_retries=0), "t", id=f"e{next(_ids)}"
        )
        row = runner.row(result.run_id or "")
    assert result.stop_reason == "model_error"
    assert (row.status, row.stop_reason) == ("finished", "model_error")
    assert row.error is not None and row.error.startswith("RuntimeError: bad")


# -- any output at all ----------------------------------------------------------------------

text = st.text(st.characters(codec=None, exclude_categories=()), max_size=30) | st.sampled_from(
    ["\x00", "\ud800", "t" * 250, "search"]
)
json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | text | st.binary(max_size=4)
values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
) | st.builds(nested, st.integers(900, 2100))
usages = (
    st.none()
    | st.integers(0, 2**70)
    | st.floats(0, 1e300)
    | st.fixed_dictionaries({"tokens": st.integers(0, 2**66), "cost": st.floats(0, 1e300)})
    | values
)
outputs = st.one_of(
    st.fixed_dictionaries({"type": st.just("final"), "content": values, "usage": usages}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool"),
            "name": text,
            "args": st.dictionaries(text, values, max_size=3),
            "usage": usages,
        }
    ),
    values,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(moves=st.lists(outputs, min_size=1, max_size=4))
def test_any_model_output_ends_the_run_finished_with_a_reason(
    db_url: str, moves: list[Any]
) -> None:
    script = iter(moves)

    def model(transcript: Transcript) -> Any:
        return next(script, {"type": "final", "content": "out of moves"})

    with Runner(db_url) as runner:
        result = runner.run(Agent(model, TOOLS, max_steps=5), "t", id=f"p{next(_ids)}")
        row = runner.row(result.run_id or "")
        stored = runner.get(row.id)
    assert result.stop_reason is not None
    assert (row.status, row.stop_reason) == ("finished", result.stop_reason)
    assert stored.transcript == result.transcript


# -- nesting: refused at parse time by a fixed limit, never later by the stack's depth -------


def deep_stack(levels: int, call: Callable[[], Any]) -> Any:
    """`call()` from `levels` frames further down the stack than here."""
    return call() if levels == 0 else deep_stack(levels - 1, call)


@pytest.mark.parametrize(
    "output",
    [
        {"type": "final", "content": nested(MAX_NESTING)},
        {"type": "tool", "name": "search", "args": {"q": nested(MAX_NESTING - 1)}},
    ],
    ids=["answer", "args"],
)
def test_a_value_at_the_nesting_limit_is_journaled_from_however_deep_a_stack(
    db_url: str, output: Any
) -> None:
    # The parse-time check used to be the interpreter's own RecursionError: a value that
    # passed it near the limit could overflow when the journal encoded it a few frames
    # deeper, and the run died with EntryRefused. The fixed limit leaves room for a caller's
    # deep stack (600 frames here) on top of the journal's own.
    with Runner(db_url) as runner:
        run = deep_stack(600, lambda: runner.run(Agent(once(output), TOOLS), "t", id="deep"))
        stored = runner.get("deep")
    assert run.stop_reason == "final"
    assert "InvalidAction" not in str(run.transcript)
    assert stored.transcript == run.transcript


@pytest.mark.parametrize(
    "output",
    [
        {"type": "final", "content": nested(MAX_NESTING + 1)},
        {"type": "tool", "name": "search", "args": {"q": nested(MAX_NESTING)}},
    ],
    ids=["answer", "args"],
)
def test_one_level_past_the_nesting_limit_is_refused_at_parse_time(output: Any) -> None:
    result = run_agent(once(output), TOOLS, "t")
    assert result.transcript[2]["content"].startswith("InvalidAction:")
    assert "nested too deeply" in result.transcript[2]["content"]
