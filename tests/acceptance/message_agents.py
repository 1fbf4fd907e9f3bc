"""The agent of tests/acceptance/test_messages.py, loaded by path in `runner` processes.

`listener` calls `hold` at step 1: the tool marks `held` in the ledger folder
(RUNNER_TEST_LEDGER) and waits until the gate file (RUNNER_TEST_GATE) exists, so a test can
send the run a message while a worker executes it. Then it answers with every user turn
after the task. Each model call appends the user turns it was shown to `seen.log` (one
JSON list a line), outside the runner's database: what the model really saw.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from runner import Agent, tool

GATE_TIMEOUT = 60.0


def _folder() -> Path:
    return Path(os.environ["RUNNER_TEST_LEDGER"])


@tool(idempotent=True)
def hold() -> str:
    (_folder() / "held").touch()
    gate = Path(os.environ["RUNNER_TEST_GATE"])
    give_up = time.monotonic() + GATE_TIMEOUT
    while not gate.exists():  # the test opens it: a file, not a clock
        if time.monotonic() > give_up:
            raise TimeoutError("the gate was never opened")
        time.sleep(0.01)
    return "held"


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    told = [m["content"] for m in transcript if m["role"] == "user"]
    with (_folder() / "seen.log").open("a") as log:
        log.write(json.dumps(told) + "\n")
    if not any(m["role"] == "tool" for m in transcript):
        return {"type": "tool", "name": "hold", "args": {}}
    return {"type": "final", "content": " | ".join(told[1:]) or "nothing said"}


listener = Agent(model, {"hold": hold}, name="listener")
