"""The agent of the queue acceptance tests: each run records when it starts and ends.

One model call per run: it appends `start` (with the time and its pid) to `spans.jsonl` in
the folder RUNNER_TEST_LEDGER names, thinks for RUNNER_TEST_THINK seconds (default 0.3),
appends `end` and answers. Both lines fall inside the run's claim (from its claim to its
final commit), so runs whose lines overlap were running at once.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from runner import Agent


def _record(event: str, task: str) -> None:
    line = json.dumps({"event": event, "run": task, "t": time.time(), "pid": os.getpid()})
    fd = os.open(
        Path(os.environ["RUNNER_TEST_LEDGER"]) / "spans.jsonl",
        os.O_WRONLY | os.O_APPEND | os.O_CREAT,
        0o644,
    )
    try:
        os.write(fd, (line + "\n").encode())  # one write of one line: never interleaved
    finally:
        os.close(fd)


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    task = transcript[0]["content"]
    _record("start", task)
    time.sleep(float(os.environ.get("RUNNER_TEST_THINK", "0.3")))
    _record("end", task)
    return {"type": "final", "content": f"done {task}"}


agent = Agent(model, name="timed")
