"""The agents of the sub-agent crash tests (test_tree_crash.py): a lead that hands two
tasks to two sub-agents at once, each of which calls a plain (non-idempotent) tool once,
keeping a ledger of every call that really ran, then answers. Every model call reports 10
tokens; the models answer from the transcript alone, so a resumed run goes on as it was."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runner import Agent, current_call
from runner.core.faults import fault
from runner.testing import FunctionModel, tool_results, turns

LEDGER_VARIABLE = "RUNNER_TEST_LEDGER"  # as agents.py's: this file is loaded by path

ANSWER = "papers done + web done"


def _ledger(line: str) -> None:
    with (Path(os.environ[LEDGER_VARIABLE]) / "tree.ledger").open("a") as ledger:
        ledger.write(line + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


def effect(note: str) -> str:
    """A plain tool with an effect outside the run: neither idempotent nor reconcilable."""
    call = current_call()
    assert call is not None
    _ledger(f"effect {call.run_id} {call.idempotency_key} {call.attempt}")
    fault("during_tool")
    return f"noted {note}"


def _child(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    task = transcript[0]["content"]
    if turns(transcript) == 0:
        return {"type": "tool", "name": "effect", "args": {"note": task}, "usage": 10}
    return {"type": "final", "content": f"{task} done", "usage": 10}


def _lead(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if turns(transcript) == 0:
        calls = [
            {"name": "web", "args": {"task": "web"}},
            {"name": "papers", "args": {"task": "papers"}},
        ]
        return {"type": "tool", "calls": calls, "usage": 10}
    answers = sorted(str(message["content"]) for message in tool_results(transcript))
    return {"type": "final", "content": " + ".join(answers), "usage": 10}


web = Agent(FunctionModel(_child), {"effect": effect}, name="web")
papers = Agent(FunctionModel(_child), {"effect": effect}, name="papers")
lead = Agent(
    FunctionModel(_lead),
    {"web": web.as_tool("web"), "papers": papers.as_tool("papers")},
    name="lead",
    max_steps=20,
)
