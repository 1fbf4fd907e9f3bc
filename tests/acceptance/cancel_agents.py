"""The agents of the cancel tests (test_cancels_land.py): a lead that hands two tasks at
once to a `hold` sub-agent and to a `mid` sub-agent, which hands its own to a `hold`
grandchild. A `hold` run calls `block`, which notes in the ledger that it began and then
waits for ever (for a file nobody writes): its worker holds the run until it dies."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runner import Agent, current_call
from runner.testing import FunctionModel, turns

LEDGER_VARIABLE = "RUNNER_TEST_LEDGER"  # as agents.py's: this file is loaded by path


def block(note: str) -> str:
    call = current_call()
    assert call is not None
    ledger = Path(os.environ[LEDGER_VARIABLE])
    with (ledger / "cancel.ledger").open("a") as written:
        written.write(f"began {call.run_id} {call.idempotency_key}\n")
        written.flush()
        os.fsync(written.fileno())
    while not (ledger / "never").exists():
        time.sleep(0.05)
    return f"held {note}"


def _hold(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if turns(transcript) == 0:
        return {"type": "tool", "name": "block", "args": {"note": transcript[0]["content"]}}
    return {"type": "final", "content": "held"}


def _handing(*names: str) -> Any:
    def move(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        if turns(transcript) == 0:
            calls = [{"name": name, "args": {"task": name}} for name in names]
            return {"type": "tool", "calls": calls}
        return {"type": "final", "content": "done"}

    return FunctionModel(move)


hold = Agent(FunctionModel(_hold), {"block": block}, name="hold")
mid = Agent(_handing("hold"), {"hold": hold.as_tool("hold")}, name="mid")
lead = Agent(
    _handing("hold", "mid"),
    {"hold": hold.as_tool("hold"), "mid": mid.as_tool("mid")},
    name="lead",
)
