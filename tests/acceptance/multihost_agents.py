"""The agent of the multi-host test (test_multihost.py), loaded by `runner worker` processes
that each run on a "host" of their own (a network, PID and UTS namespace).

Its one tool, `charge`, is NOT idempotent and takes no key: a second run of it would be a
second charge. It writes a line to the ledger (RUNNER_TEST_LEDGER) when it starts, naming
the host, then waits until the test opens the gate (RUNNER_TEST_GATE, a file) and writes
another when it ends. The model charges once, then answers with what it was told.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from runner import Agent, current_call, tool

GATE_TIMEOUT = 300.0


def _append(record: dict[str, Any]) -> None:
    # One write() of one short line with O_APPEND: lines from many processes never
    # interleave, and a SIGKILL cannot leave half a line behind.
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    path = Path(os.environ["RUNNER_TEST_LEDGER"]) / "charges.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@tool
def charge(n: int) -> str:
    call = current_call()
    assert call is not None
    record = {"run": call.run_id, "step": call.step, "host": socket.gethostname(), "n": n}
    _append({**record, "event": "start"})
    gate = os.environ.get("RUNNER_TEST_GATE")
    give_up = time.monotonic() + GATE_TIMEOUT
    while gate and not os.path.exists(gate):
        if time.monotonic() > give_up:
            raise TimeoutError(f"the test never opened the gate {gate}")
        time.sleep(0.02)
    _append({**record, "event": "end"})
    return f"charged {n}"


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    told = [m for m in transcript if m["role"] == "tool"]
    if not told:
        return {"type": "tool", "name": "charge", "args": {"n": 1}}
    return {"type": "final", "content": f"told: {told[0]['content']}"}


agent = Agent(model, {"charge": charge}, name="multihost-test", max_steps=3)
