"""A support agent in two releases, each run scored by a model-judged scorer.

Release 1 reads the store's return policy before it answers; release 2 skips it for
questions about shoes, and answers from memory. The judge's model here is a scripted
stand-in for a real one (no key, no network): swap in `OpenAIChat(...)` or
`AnthropicMessages(...)` and the scorer is the same. Run it with:

    runner submit examples/support.py:release_1 --from examples/support_tasks.jsonl
    runner submit examples/support.py:release_2 --from examples/support_tasks.jsonl
    runner worker --once
    runner stats --by release
"""

from __future__ import annotations

from typing import Any

from runner import Agent, ScoredRun, judge, tool

POLICY = "Returns are accepted within 30 days of purchase, with the receipt."


@tool(idempotent=True)
def return_policy() -> str:
    """The store's return policy, word for word."""
    return POLICY


def careful(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Release 1: look the policy up, then answer with it."""
    if len(transcript) == 1:
        return {"type": "tool", "name": "return_policy", "args": {}, "usage": {"tokens": 60}}
    return {"type": "final", "content": f"Per our policy: {transcript[-1]['content']}"}


def hasty(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Release 2: answers questions about shoes from memory."""
    if "shoes" in transcript[0]["content"]:
        return {"type": "final", "content": "Sure, bring them back whenever you like."}
    return careful(transcript)


def grader(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge's model: grades 1 an answer that states the policy, 0.2 one that does not."""
    answer = transcript[0]["content"].split("The agent's answer", 1)[1]
    usage = {"tokens": 120, "cost": 0.0002}
    if "30 days" in answer:
        return {"type": "final", "content": "1\nIt states the 30-day limit.", "usage": usage}
    return {
        "type": "final",
        "content": "0.2\nIt promises what the policy does not.",
        "usage": usage,
    }


# A model-judged scorer: its calls draw from the provider limit `judge` (`runner limit set`).
follows_policy = judge(
    grader,
    "Does the answer state the store's return policy correctly?",
    name="follows_policy",
    limit="judge",
)


def answered(run: ScoredRun) -> bool:
    """1 if the run gave an answer, 0 if a budget or an error stopped it."""
    return run.stop_reason == "final"


release_1 = Agent(
    careful,
    {"return_policy": return_policy},
    name="support",
    release="1",
    scorers=[follows_policy, answered],
)
release_2 = Agent(
    hasty,
    {"return_policy": return_policy},
    name="support",
    release="2",
    scorers=[follows_policy, answered],
)
