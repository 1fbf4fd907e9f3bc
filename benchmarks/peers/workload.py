"""The agent every contender of `peers_step.py` runs, and what its processes share.

One agent step is one scripted model call that returns one tool call, then that tool call,
which returns a short string; a run is N such steps. runner's run also ends with the
model's final answer (one more model call and one more commit than the peers' runs): its
loop cannot end a run without one. Pure Python with no dependency, so that every
contender's interpreter (runner's venv, the peers' venv) can import it.

A contender's script makes one warm-up run, then RUNS timed runs, and prints one line
`RESULT {json}`: the timed runs' wall and CPU time (this process's, all its threads; the
database server's is not in it) over RUNS x N steps, in µs a step.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

Message = dict[str, Any]


def fake_model(transcript: Sequence[Any], i: int) -> Message:
    """The model's reply: one call of the `echo` tool (it looks at the transcript's length,
    as a real client would walk it)."""
    _ = len(transcript)
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"call_{i}", "name": "echo", "args": {"i": i}}],
    }


def fake_tool(call: Message) -> str:
    return f"echo result {call['args']['i']}"


def tool_message(call: Message, result: str) -> Message:
    return {"role": "tool", "tool_call_id": call["id"], "content": result}


class Clock:
    """Wall time and this process's CPU time (all threads) since it was made."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def since(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def measure(one_run: Callable[[], tuple[float, float]], n: int, runs: int) -> dict[str, Any]:
    """One warm-up run, then `runs` timed ones: µs a step of wall and of CPU."""
    one_run()
    timed = [one_run() for _ in range(runs)]
    return {
        "per_step_us": sum(t[0] for t in timed) / (n * runs) * 1e6,
        "cpu_per_step_us": sum(t[1] for t in timed) / (n * runs) * 1e6,
        "run_ms": sorted(round(t[0] * 1000, 2) for t in timed),
    }


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def remove_sqlite(path: str) -> None:
    """A SQLite file and its companions, so that each contender starts from nothing."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)
