"""Test agents for the worker acceptance tests: every call leaves a trace outside the database.

The model and the tools append JSON lines to ledgers in the folder named by
RUNNER_TEST_LEDGER, so a test can tell, independently of runner's own journal, which process
made which model call and which tool call, and which side effects took place:

- `model.jsonl`: one line per model call: run tag, step, pid.
- `tools.jsonl`: one line per tool invocation (`begin`, and `end` when it returned): tool,
  run id, step, attempt, idempotency key, pid.
- `effects.jsonl`: the key-aware side effect. A tool that takes `idempotency_key` applies its
  effect once per key (checked under a file lock, as a payment API checks its keys), so a
  call re-run after a crash with the same key is absorbed (`duplicate` line) and never doubled.

The task text decides what the model does: "MODE TAG", where TAG is the run id the test chose
(the model sees only the transcript, so the id travels in the task). Budgets: 3 steps, one
error in a row, one repeat. The stop reason follows from the mode:

- `final`: record once, then answer -> final (2 steps)
- `thinking`: as `final`, but each model call takes RUNNER_TEST_THINK seconds (default
  0.3), as a real model does: a run killed while it thinks has recorded nothing new
- `max_steps`: record with new arguments every step -> max_steps (3 steps)
- `tool_errors`: a tool that raises, twice -> tool_errors (2 steps)
- `repeated_call`: the same record call twice -> repeated_call (2 steps, 1 tool call)
- `slow`: two calls of a tool that applies its effect then sleeps RUNNER_TEST_SLOW seconds
  (read at each call, default 0.5), then answer -> final (3 steps). With RUNNER_TEST_GATE
  (a file path) set, the tool waits instead until that file exists: a test holds a run
  inside its tool call for as long as it looks, whatever the machine's load
- `poison`: a tool declared idempotent that SIGKILLs its own process: every resume re-runs
  it, the run never progresses -> crash_loop
- `approval`: one call of `approved`, the key-aware record that waits for a person's
  approval first, then the answer: `done TAG`, or `denied TAG: <reason>` -> final (2 steps)
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner import Agent, current_call, tool

LEDGER_VARIABLE = "RUNNER_TEST_LEDGER"
SLOW_VARIABLE = "RUNNER_TEST_SLOW"
GATE_VARIABLE = "RUNNER_TEST_GATE"
THINK_VARIABLE = "RUNNER_TEST_THINK"
# The longest a gated tool waits for its gate: a test that never opens it fails, not hangs.
GATE_TIMEOUT = 300.0


def _folder() -> Path:
    return Path(os.environ[LEDGER_VARIABLE])


def _append(name: str, record: dict[str, Any]) -> None:
    # One write() of one short line with O_APPEND: lines from many processes and threads
    # never interleave, and a SIGKILL cannot leave half a line behind.
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(_folder() / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _call_record(tool_name: str, event: str) -> dict[str, Any]:
    call = current_call()
    assert call is not None, "a tool runs inside a tool call"
    return {
        "event": event,
        "tool": tool_name,
        "run": call.run_id,
        "step": call.step,
        "attempt": call.attempt,
        "key": call.idempotency_key,
        "pid": os.getpid(),
    }


def _apply_effect(tool_name: str, key: str) -> None:
    """The side effect, at most once per idempotency key across every process."""
    record = _call_record(tool_name, "effect")
    path = _folder() / "effects.jsonl"
    with open(_folder() / "effects.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = path.exists() and any(
            json.loads(line)["key"] == key
            for line in path.read_text().splitlines()
            if json.loads(line)["event"] == "effect"
        )
        _append("effects.jsonl", {**record, "event": "duplicate" if done else "effect"})


@tool
def record(n: int, idempotency_key: str) -> str:
    _append("tools.jsonl", _call_record("record", "begin"))
    _apply_effect("record", idempotency_key)
    _append("tools.jsonl", _call_record("record", "end"))
    return f"recorded {n}"


@tool
def slow(n: int, idempotency_key: str) -> str:
    # The effect first, then the wait: a worker killed while it sleeps has already applied
    # the effect, so the re-run after the crash must be absorbed by the key.
    _append("tools.jsonl", _call_record("slow", "begin"))
    _apply_effect("slow", idempotency_key)
    gate = os.environ.get(GATE_VARIABLE)
    if gate:
        give_up = time.monotonic() + GATE_TIMEOUT
        while not os.path.exists(gate):
            if time.monotonic() > give_up:
                raise TimeoutError(f"the test never opened the gate {gate}")
            time.sleep(0.02)
    else:
        time.sleep(float(os.environ.get(SLOW_VARIABLE, "0.5")))
    _append("tools.jsonl", _call_record("slow", "end"))
    return f"slow {n}"


@tool
def fail(n: int) -> str:
    _append("tools.jsonl", _call_record("fail", "begin"))
    raise RuntimeError(f"fail {n} always fails")


@tool(idempotent=True)
def poison() -> str:
    _append("tools.jsonl", _call_record("poison", "begin"))
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


# The same effect as `record`, after a person's approval.
approved = replace(record, approval=True)


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    mode, _, tag = str(transcript[0]["content"]).partition(" ")
    step = 1 + sum(1 for message in transcript if message["role"] == "assistant")
    _append("model.jsonl", {"run": tag, "step": step, "pid": os.getpid()})
    usage = {"tokens": 10, "cost": 0.001}
    answer = {"type": "final", "content": f"done {tag}", "usage": usage}

    def call(name: str, **args: Any) -> dict[str, Any]:
        return {"type": "tool", "name": name, "args": args, "usage": usage}

    if mode == "thinking":
        time.sleep(float(os.environ.get(THINK_VARIABLE, "0.3")))
    if mode == "stuck":  # a model that never answers (a hung connection, say)
        threading.Event().wait()
    if mode in ("final", "thinking"):
        return call("record", n=1) if step == 1 else answer
    if mode == "max_steps":
        return call("record", n=step)
    if mode == "tool_errors":
        return call("fail", n=step)
    if mode == "repeated_call":
        return call("record", n=0)
    if mode == "slow":
        return call("slow", n=step) if step < 3 else answer
    if mode == "poison":
        return call("poison")
    if mode == "approval":
        seen = [m for m in transcript if m["role"] == "tool"]
        if not seen:
            return call("approved", n=1)
        if seen[0]["is_error"]:
            return {"type": "final", "content": f"denied {tag}: {seen[0]['content']}"}
        return answer
    return {"type": "final", "content": f"unknown mode {mode!r}", "usage": usage}


agent = Agent(
    model,
    {"record": record, "slow": slow, "fail": fail, "poison": poison, "approved": approved},
    name="worker-test",
    release="t1",
    max_steps=3,
    max_tokens=None,
    max_consecutive_errors=1,
    max_repeats=1,
)
