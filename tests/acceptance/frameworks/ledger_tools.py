"""The tools' work for the framework crash tests' agents (pydantic_agents.py, sdk_agents.py),
with ledgers kept outside runner's database, in the folder RUNNER_TEST_LEDGER names:
- calls.log: `tool key attempt pid` per tool invocation, written as the tool starts.
- effects.db: deposit's effects, one row per idempotency key (UNIQUE): a second call with a
  key it has seen changes nothing and returns the first call's result.
- notices.log: `key attempt pid` per effect of notify, which is neither idempotent nor
  key-aware: after a crash inside it, runner must not run it again.

Each calls `runner.core.faults.fault("during_tool")` after its effect, so
RUNNER_FAULT=during_tool@N kills the process inside the N-th tool call, its effect done but
not recorded. A module beside the agent files: loading one puts this folder on the path.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from runner import current_call
from runner.core.faults import fault


def _folder() -> Path:
    return Path(os.environ["RUNNER_TEST_LEDGER"])


def _note(name: str, line: str) -> None:
    with open(_folder() / name, "a") as ledger:
        ledger.write(line + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


def _call() -> tuple[str, int]:
    call = current_call()
    assert call is not None, "a tool runs inside a runner call"
    return call.idempotency_key, call.attempt


def deposit_effect(amount: int) -> str:
    """deposit's work, shared with sdk_agents.py: its effect once per key, then the fault."""
    key, attempt = _call()
    _note("calls.log", f"deposit {key} {attempt} {os.getpid()}")
    with sqlite3.connect(_folder() / "effects.db", isolation_level=None) as db:
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT UNIQUE, balance INT)")
        db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (key, amount * 10))
        (balance,) = db.execute("SELECT balance FROM effects WHERE key = ?", (key,)).fetchone()
    fault("during_tool")
    return f"balance {balance}"


def notify_effect(text: str) -> str:
    """notify's work: a notice per call, then the fault."""
    key, attempt = _call()
    _note("calls.log", f"notify {key} {attempt} {os.getpid()}")
    _note("notices.log", f"{key} {attempt} {os.getpid()}")
    fault("during_tool")
    return "sent"
