"""An agent and a codec the payload tests name by reference (a worker imports them)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runner import Agent
from runner.store.codec import Encoded, Header
from runner.testing import FunctionModel, call, final, tool_results

SECRET = "the secret word is swordfish"


class Hide:
    """A user's codec: every byte inverted (nothing of the value is readable in its row)."""

    name = "invert"

    def encode(self, data: bytes) -> Encoded:
        return Encoded(bytes(255 - b for b in data), {})

    def decode(self, data: bytes, header: Header) -> bytes:
        return bytes(255 - b for b in data)


# A folder where `look` marks that it started, then waits for the file `open` there (a test
# does something while a worker holds the run).
GATE_VARIABLE = "RUNNER_TEST_PAYLOAD_GATE"


def look(q: str, size: int = 0) -> str:
    gate = os.environ.get(GATE_VARIABLE)
    if gate:
        (Path(gate) / "started").touch()
        give_up = time.monotonic() + 60
        while not (Path(gate) / "open").exists() and time.monotonic() < give_up:
            time.sleep(0.02)
    return f"found {q}" + "x" * size


def _move(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    results = tool_results(transcript)
    if len(results) >= 2:
        return final("answer: " + results[-1]["content"][:40])
    big = (
        int(transcript[0]["content"].rsplit(" ", 1)[-1])
        if transcript[0]["content"][-1:].isdigit()
        else 0
    )
    return call("look", q=f"{SECRET} {len(results)}", size=big)


agent = Agent(FunctionModel(_move), {"look": look}, name="payloads")
REF = f"{Path(__file__).resolve()}:agent"
