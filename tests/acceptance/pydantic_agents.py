"""Pydantic AI agents for the crash tests, durable under `RunnerAgent`, with ledgers of their
own kept outside runner's database (what really happened, written before a kill can come).

The model is pydantic-ai's own OpenAI model class, talking HTTP to the chat-completions
server the test runs at RUNNER_TEST_OPENAI_URL (tests/acceptance/test_pydantic_crash.py).
Ledgers, in the folder RUNNER_TEST_LEDGER names:
- calls.log: `tool key attempt pid` per tool invocation, written as the tool starts.
- effects.db: deposit's effects, one row per idempotency key (UNIQUE): a second call with a
  key it has seen changes nothing and returns the first call's result.
- notices.log: `key attempt pid` per effect of notify, which is neither idempotent nor
  key-aware: after a crash inside it, runner must not run it again.

Every tool calls `runner.core.faults.fault("during_tool")` after its effect, so
RUNNER_FAULT=during_tool@N kills the process inside the N-th tool call, its effect done but
not recorded. `gated` is `ledgered` with notify needing a person's approval.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from runner import current_call
from runner.core.faults import fault
from runner.integrations.pydantic_ai import RunnerAgent, durable


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


def _model() -> OpenAIChatModel:
    url = os.environ.get("RUNNER_TEST_OPENAI_URL", "http://127.0.0.1:9")
    provider = OpenAIProvider(base_url=f"{url}/v1", api_key="test-key-3f9c1b7d")
    return OpenAIChatModel("gpt-4.1-mini", provider=provider)


def _agent(name: str, *, gated: bool) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(_model(), name=name, instructions="Deposit, then notify.")

    @agent.tool_plain
    @durable(idempotent=True)
    def deposit(amount: int) -> str:
        """Deposit an amount; applied once per idempotency key."""
        key, attempt = _call()
        _note("calls.log", f"deposit {key} {attempt} {os.getpid()}")
        with sqlite3.connect(_folder() / "effects.db", isolation_level=None) as db:
            db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT UNIQUE, balance INT)")
            db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (key, amount * 10))
            (balance,) = db.execute("SELECT balance FROM effects WHERE key = ?", (key,)).fetchone()
        fault("during_tool")
        return f"balance {balance}"

    def notify(text: str) -> str:
        """Tell the owner."""
        key, attempt = _call()
        _note("calls.log", f"notify {key} {attempt} {os.getpid()}")
        _note("notices.log", f"{key} {attempt} {os.getpid()}")
        fault("during_tool")
        return "sent"

    agent.tool_plain(requires_approval=gated)(notify)
    return agent


ledgered = RunnerAgent(_agent("ledgered", gated=False), max_steps=6)
gated = RunnerAgent(_agent("gated", gated=True), max_steps=6)
