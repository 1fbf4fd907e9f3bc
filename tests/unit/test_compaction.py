"""Compaction: older steps summarised once the view passes a size, the summary journaled and
reused (a resume, a fork, a replay never ask again), its spend charged to the run."""

from __future__ import annotations

import re
from typing import Any

import pytest

from runner import Agent, Compaction, run_agent
from runner.core.compaction import INSTRUCTIONS, Compacted
from runner.core.journal import EntryKind
from runner.testing import FunctionModel, tool_results, turns
from runner.testing import call as call_tool
from runner.testing import final as answer
from tests.unit.store_support import memory_runner

Transcript = list[dict[str, Any]]
TASK = {"role": "user", "content": "read every page"}
PAGE = "x" * 400


def call(n: int) -> dict[str, Any]:
    return {"role": "assistant", "tool": "read", "args": {"i": n}}


def seen(n: int) -> dict[str, Any]:
    return {"role": "tool", "name": "read", "content": f"page {n} {PAGE}", "is_error": False}


def transcript_of(steps: int) -> Transcript:
    messages: Transcript = [TASK]
    for n in range(1, steps + 1):
        messages += [call(n), seen(n)]
    return messages


class Reader:
    """A model that reads pages 1..last, then answers; asked for a summary, it names the
    pages the summary covers. It keeps every summary request and every view it was shown."""

    def __init__(self, last: int, crash_at: int | None = None) -> None:
        self.last = last
        self.crash_at = crash_at  # the page whose request raises Crash (once)
        self.summaries: list[str] = []
        self.views: list[Transcript] = []

    def __call__(self, transcript: Transcript) -> dict[str, Any]:
        text = str(transcript[-1].get("content"))
        if len(transcript) == 1 and text.startswith(INSTRUCTIONS):
            self.summaries.append(text)
            pages = [int(n) for n in re.findall(r"page (\d+)", text)]
            return {"type": "final", "content": f"read up to page {max(pages)}", "usage": 5}
        self.views.append(list(transcript))
        shown = " ".join(str(m.get("content")) for m in transcript)
        done = max((int(n) for n in re.findall(r"(?:page|up to page) (\d+)", shown)), default=0)
        if done >= self.last:
            return {"type": "final", "content": "done", "usage": 1}
        if self.crash_at == done + 1:
            self.crash_at = None
            raise Crash
        return {"type": "tool", "name": "read", "args": {"i": done + 1}, "usage": 10}


class Crash(BaseException):
    """Stands for the process dying: it passes every handler, the lease stays held."""


def read(i: int) -> str:
    return f"page {i} {PAGE}"


def test_compacts_only_once_the_view_is_over_the_size() -> None:
    transcript = transcript_of(3)
    size = Compacted(Compaction(above_tokens=0)).tokens(transcript)
    assert Compacted(Compaction(above_tokens=size, keep_steps=1)).due(transcript) is None
    due = Compacted(Compaction(above_tokens=size - 1, keep_steps=1)).due(transcript)
    assert due is not None and (due.start, due.end, due.steps) == (1, 5, 2)


def test_a_tool_call_is_never_parted_from_its_results() -> None:
    several = {"role": "assistant", "calls": [{"name": "read", "args": {"i": 3}}] * 2}
    transcript = [*transcript_of(2), several, seen(3), seen(4), call(5), seen(5)]
    compacted = Compacted(Compaction(above_tokens=0, keep_steps=2))
    due = compacted.due(transcript)
    assert due is not None and transcript[due.end] is several
    compacted.apply(Compacted.record(due), "S")
    shown = compacted.view(transcript)
    assert shown[0] == TASK and shown[1]["content"].endswith("]\nS")
    assert shown[2:] == [several, seen(3), seen(4), call(5), seen(5)]
    # Nothing left to fold in while only the kept steps follow the summary.
    assert compacted.due(transcript) is None


def test_a_run_summarises_its_summaries_and_pays_for_them() -> None:
    model = Reader(last=8)
    policy = Compaction(above_tokens=300, keep_steps=1)
    result = run_agent(model, {"read": read}, "read", max_steps=20, max_tokens=None,
                       max_repeats=None, context=policy)  # fmt: skip
    assert result.output == "done" and result.steps == 9
    assert len(model.summaries) >= 2
    # The second summary is asked with the first: a summary of summaries.
    assert "[Summary of the first" in model.summaries[1]
    assert "read up to page" in model.summaries[1]
    # The view stays under the size (two steps, with a summary before them or not).
    assert max(len(view) for view in model.views) <= 6
    # The transcript stays whole; each summary's 5 tokens are charged to the run.
    assert len(result.transcript) == 1 + 8 * 2 + 1
    assert result.tokens == 8 * 10 + 1 + 5 * len(model.summaries)


def test_a_summary_that_spends_the_budget_stops_the_run() -> None:
    model = Reader(last=8)
    policy = Compaction(above_tokens=300, keep_steps=1)
    result = run_agent(model, {"read": read}, "read", max_steps=20, max_tokens=32,
                       max_repeats=None, context=policy)  # fmt: skip
    # Three steps spend 30; the summary before step 4 takes the run to 35, past 32.
    assert result.stop_reason == "token_budget" and result.tokens == 35
    assert result.steps == 3
    assert len(model.summaries) == 1


def test_a_resume_a_fork_and_a_replay_reuse_the_journaled_summary() -> None:
    runner, _, _ = memory_runner()
    model = Reader(last=6, crash_at=4)
    agent = Agent(model, {"read": read}, context=Compaction(above_tokens=300, keep_steps=1),
                  max_steps=20, max_tokens=None, max_repeats=None)  # fmt: skip
    with pytest.raises(Crash):
        runner.run(agent, "read", id="r1")
    asked = len(model.summaries)
    assert asked == 1  # journaled before the call of step 4, whose model call "died"
    result = runner.resume("r1", agent=agent, steal=True)
    assert result.output == "done"
    entries = [entry for entry, _ in runner.store.load_entries("r1")]
    kinds = [entry.kind for entry in entries]
    summaries = [entry for entry in entries if entry.kind is EntryKind.COMPACTION]
    assert len(summaries) == len(model.summaries) - asked + 1
    assert kinds.index(EntryKind.COMPACTION) < kinds.index(EntryKind.ACTION, 6)
    # The resumed step 4 was shown the summary journaled before the crash.
    assert any("read up to page 2" in str(m.get("content")) for m in model.views[-3])
    assert result.tokens == 6 * 10 + 1 + 5 * len(summaries)

    # A fork past the first summary, and a replay, ask for none.
    before = len(model.summaries)
    fork = runner.fork("r1", 3, agent=agent)
    assert [e.kind for e, _ in runner.store.load_entries(fork)].count(EntryKind.COMPACTION) == 1
    assert runner.resume(fork, agent=agent).output == "done"
    assert runner.replay("r1", agent=agent).agrees
    forked = [e for e, _ in runner.store.load_entries(fork) if e.kind is EntryKind.COMPACTION]
    assert len(model.summaries) - before == len(forked) - 1


def test_observations_cut_are_cut_in_the_view_its_size_and_the_request() -> None:
    transcript = transcript_of(3)
    compacted = Compacted(Compaction(above_tokens=0, keep_steps=1, cut_observations=10))
    whole = Compacted(Compaction(above_tokens=0)).tokens(transcript)
    assert compacted.tokens(transcript) * 3 < whole
    due = compacted.due(transcript)
    assert due is not None
    assert PAGE not in compacted.request(transcript, due)[0]["content"]
    compacted.apply(Compacted.record(due), "S")
    assert compacted.view(transcript)[-1]["content"] == "page 3 xxx[... 397 characters cut]"
    assert transcript[-1] == seen(3)  # the transcript is never changed


def test_a_summary_call_draws_from_the_runs_provider_limit() -> None:
    runner, _, _ = memory_runner()
    runner.set_limit("m", tokens_per_minute=100_000, requests_per_minute=100)
    model = Reader(last=6)
    agent = Agent(model, {"read": read}, context=Compaction(above_tokens=300, keep_steps=1),
                  limit="m", max_steps=20, max_tokens=None, max_repeats=None)  # fmt: skip
    result = runner.run(agent, "read")
    [info] = runner.limits()
    summaries = len(model.summaries)
    assert summaries >= 1 and result.output == "done"
    assert (info.requests, info.tokens) == (7 + summaries, 6 * 10 + 1 + 5 * summaries)


def test_a_sub_agents_summaries_are_charged_to_its_tree() -> None:
    policy = Compaction(above_tokens=300, keep_steps=1)
    alone = Reader(last=6)
    run_agent(alone, {"read": read}, "read", max_steps=20, max_tokens=None, max_repeats=None,
              context=policy)  # fmt: skip
    summaries = len(alone.summaries)
    assert summaries >= 1
    # The parent's budget holds the child's steps (61 tokens) but not its summaries too.
    child = Agent(Reader(last=6), {"read": read}, context=policy, max_steps=20, max_repeats=None)
    parent = FunctionModel(
        lambda t: call_tool("reader", task="read") if turns(t) == 0 else answer("ok")
    )
    result = run_agent(parent, {"reader": child.as_tool(name="reader")}, "task",
                       max_tokens=61 + 5 * summaries - 1, max_steps=30)  # fmt: skip
    observed = tool_results(result.transcript)[0]["content"]
    assert "stopped: token_budget" in observed and result.stop_reason == "token_budget"
