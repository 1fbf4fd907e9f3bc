"""A research agent with two sub-agents: a lead hands a question to `web` and `papers` at
once (each a child run of its own), then answers from what they found.

Scripted "models": no network, no API key. Run it with:

    runner run examples/research.py:lead "Is coffee good for you?"

Set RESEARCH_PAUSE=60 to make each search take a minute (time to kill and resume).
"""

from __future__ import annotations

import os
import time
from typing import Any

from runner import Agent, tool

PAUSE = float(os.environ.get("RESEARCH_PAUSE", "0"))


@tool(idempotent=True)
def search(where: str, query: str) -> str:
    """Search one source for a query."""
    time.sleep(PAUSE)
    return f"3 {where} sources on {query!r} agree: in moderation, yes"


def researcher(where: str) -> Agent:
    """A sub-agent that searches `where` once, then reports what it found."""

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        found = [m["content"] for m in transcript if m["role"] == "tool" and not m["is_error"]]
        usage = {"tokens": 50, "cost": 0.0002}
        if not found:
            args = {"where": where, "query": transcript[0]["content"]}
            return {"type": "tool", "name": "search", "args": args, "usage": usage}
        return {"type": "final", "content": found[-1], "usage": usage}

    return Agent(model, {"search": search}, name=where)


web = researcher("web")
papers = researcher("papers")


def lead_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Ask both sub-agents at once, then answer from their reports."""
    reports = [m for m in transcript if m["role"] == "tool"]
    usage = {"tokens": 80, "cost": 0.0003}
    if not reports:
        question = transcript[0]["content"]
        calls = [
            {"name": "web", "args": {"task": question}},
            {"name": "papers", "args": {"task": question}},
        ]
        return {"type": "tool", "calls": calls, "usage": usage}
    agreed = all(not m["is_error"] and "yes" in str(m["content"]) for m in reports)
    answer = "Yes, in moderation: the web and the papers agree." if agreed else "Unclear."
    return {"type": "final", "content": answer, "usage": usage}


lead = Agent(
    lead_model,
    {
        "web": web.as_tool("web", "Research a question on the web."),
        "papers": papers.as_tool("papers", "Research a question in published papers."),
    },
    name="lead",
    max_steps=20,
    max_tokens=5_000,
)
