"""Agents for the acceptance tests: scripted models and tools that keep ledgers of their own.

The runner's database says what the runner believes happened; these ledgers, kept outside
it, say what really happened: every model call and every tool invocation, written before
the process can be killed. Referenced as `tests/acceptance/agents.py:NAME` (or `agents:NAME`
with this folder on PYTHONPATH).

Environment, read at call time so one process can serve several tests:
- RUNNER_TEST_LEDGER: the folder of the ledgers (each test has its own tmp dir).
- RUNNER_TEST_TOOL_SLEEP: seconds every tool call sleeps (to kill runs at random moments).
- RUNNER_TEST_GATE: a file path; every tool call waits until it exists (to hold a run still).
- RUNNER_TEST_HOLD=N: holds a batch of parallel calls mid-flight for a fault point to kill:
  deposit and notify, their effect done, mark themselves in held.log and wait to be killed;
  square and quick return only once N calls of their process are held. Unset, nothing waits.

Ledgers in that folder:
- model_calls.log: `task step pid` per model call. The task is the run's label: the tests
  start runs with `--id X` and task `X`, so it is the run id.
- calls.log: `tool run_id step attempt key pid` per tool invocation, written when the tool
  starts its work.
- effects.db: the key-aware tool's effects, one row per idempotency key (UNIQUE): a second
  call with a key it has seen changes nothing and returns the first call's result.
- notices.log: `run_id step attempt pid` per effect of the non-idempotent tool.

Every tool calls `runner.faults.fault("during_tool")` after its effect, so RUNNER_FAULT=
during_tool@N kills the process inside the N-th tool call, its effect done but unrecorded.

`gated` waits for people: its deposit and notify calls need approval, and it asks a
question with `ask_human` (see `gated_model`).

The plan of the scripted model, one tool call per step, repeated for each round:
  deposit(amount)           key-aware: takes `idempotency_key`, applies its effect once per key
  square(x=<balance>)       declared idempotent: a pure function, safe to run again
  notify(text)              plain, neither: after a crash inside it the runner must not run it
                            again, and the model sees an OutcomeUnknown error instead
then a final answer. The answer depends only on the deposit and square observations, never
on notify's (which may be OutcomeUnknown after a crash), so a crashed and resumed run must
answer exactly what an uncrashed one does.

The parallel agent asks for four calls in its first step (quick, square, deposit, notify:
one of each kind, quick a plain tool that finishes) and answers from square and deposit.
`gated_batch` asks in one step for square (needs nothing), deposit and notify (each needs
approval); `marked` is `ledgered` with notify declared `mark_start`; `blocked_batch` asks
for two calls that block on an event nobody sets (for Ctrl-C), each marking its start in
the ledger folder (`started-<n>`).
`openai_parallel` is the same batch through `OpenAIChat`, talking to the fake server at
RUNNER_TEST_OPENAI_URL (without notify, so a resumed run's requests equal an uncrashed one's).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner import Agent, Tool, ask_human, current_call, tool
from runner.core.faults import fault
from runner.models import OpenAIChat

LEDGER_VARIABLE = "RUNNER_TEST_LEDGER"
SLEEP_VARIABLE = "RUNNER_TEST_TOOL_SLEEP"
GATE_VARIABLE = "RUNNER_TEST_GATE"
HOLD_VARIABLE = "RUNNER_TEST_HOLD"
OPENAI_URL_VARIABLE = "RUNNER_TEST_OPENAI_URL"

AMOUNTS = (5, 7, 11, 13)
TOKENS_PER_CALL = 10
COST_PER_CALL = 0.001
GATE_TIMEOUT = 60.0


def ledger_folder() -> Path:
    folder = os.environ.get(LEDGER_VARIABLE)
    if not folder:
        raise RuntimeError(f"set {LEDGER_VARIABLE} to the folder for the test ledgers")
    return Path(folder)


def _append(name: str, *fields: object) -> None:
    # One short write to a file opened for appending: it reaches the file (the page cache)
    # before the call returns, so a SIGKILL right after cannot lose it.
    line = "\t".join(str(field) for field in fields) + "\n"
    with open(ledger_folder() / name, "a", encoding="utf-8") as ledger:
        ledger.write(line)


def _before_work(name: str) -> tuple[str, int, int, str]:
    """Wait at the gate and sleep as the test asks, then log the invocation."""
    gate = os.environ.get(GATE_VARIABLE)
    if gate:
        give_up = time.monotonic() + GATE_TIMEOUT
        while not Path(gate).exists():
            if time.monotonic() > give_up:
                raise TimeoutError(f"the test never opened the gate {gate}")
            time.sleep(0.02)
    pause = float(os.environ.get(SLEEP_VARIABLE, "0") or 0)
    if pause:
        time.sleep(pause)
    call = current_call()
    if call is None:
        raise RuntimeError("a tool ran outside a runner tool call")
    key = call.idempotency_key
    _append("calls.log", name, call.run_id, call.step, call.attempt, key, os.getpid())
    return call.run_id, call.step, call.attempt, call.idempotency_key


def _hold() -> None:
    """With RUNNER_TEST_HOLD set, stay in flight (effect done, nothing returned) until the
    test's fault point kills this process."""
    if not os.environ.get(HOLD_VARIABLE):
        return
    _append("held.log", os.getpid())
    time.sleep(GATE_TIMEOUT)
    raise TimeoutError("a held call was never killed")


def _after_held() -> None:
    """With RUNNER_TEST_HOLD=N set, wait until N calls of this process are held."""
    wanted = int(os.environ.get(HOLD_VARIABLE) or 0)
    give_up = time.monotonic() + GATE_TIMEOUT
    while wanted:
        held = [line for line in _read("held.log") if line == str(os.getpid())]
        if len(held) >= wanted:
            return
        if time.monotonic() > give_up:
            raise TimeoutError("the held calls never started")
        time.sleep(0.01)


def _read(name: str) -> list[str]:
    path = ledger_folder() / name
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def deposit(amount: int, idempotency_key: str) -> str:
    """Add `amount` to this run's balance once per key; return the balance after it."""
    run_id, step, _attempt, _key = _before_work("deposit")
    path = ledger_folder() / "effects.db"
    with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, "
            "step INTEGER NOT NULL, amount INTEGER NOT NULL, balance INTEGER NOT NULL)"
        )
        db.execute("BEGIN IMMEDIATE")
        seen = db.execute(
            "SELECT balance FROM effects WHERE key = ?", (idempotency_key,)
        ).fetchone()
        if seen is not None:
            balance = int(seen[0])
        else:
            (before,) = db.execute(
                "SELECT COALESCE(SUM(amount), 0) FROM effects WHERE run_id = ?", (run_id,)
            ).fetchone()
            balance = int(before) + amount
            db.execute(
                "INSERT INTO effects (key, run_id, step, amount, balance) VALUES (?, ?, ?, ?, ?)",
                (idempotency_key, run_id, step, amount, balance),
            )
        db.execute("COMMIT")
    _hold()
    fault("during_tool")
    return str(balance)


@tool(idempotent=True)
def square(x: str) -> str:
    """A pure function of its argument: running it twice is harmless."""
    _before_work("square")
    result = str(int(x) ** 2)
    _after_held()
    fault("during_tool")
    return result


def notify(text: str) -> str:
    """Send a notice: a side effect with no key, which must never happen twice for a step."""
    run_id, step, attempt, _key = _before_work("notify")
    _append("notices.log", run_id, step, attempt, os.getpid())
    _hold()
    fault("during_tool")
    return "sent"


def quick(x: int) -> str:
    """A plain tool that finishes: in a batch, it is the call a crash must never re-run."""
    _before_work("quick")
    _after_held()
    return f"quick {x}"


BATCH = [
    {"id": "call_q", "name": "quick", "args": {"x": 1}},
    {"id": "call_s", "name": "square", "args": {"x": "3"}},
    {"id": "call_d", "name": "deposit", "args": {"amount": 5}},
    {"id": "call_n", "name": "notify", "args": {"text": "batch"}},
]


def parallel_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Step 1: the four calls at once; step 2: the answer, from square and deposit only."""
    step = _log_model_call(transcript)
    if step == 1:
        return {"type": "tool", "calls": BATCH, "text": "All four at once.", "usage": _usage()}
    results = {m["id"]: m["content"] for m in transcript if m["role"] == "tool"}
    answer = f"square {results['call_s']}; balance {results['call_d']}"
    return {"type": "final", "content": answer, "usage": _usage()}


def openai_parallel() -> Agent:
    """The batch (less notify) through the OpenAI adapter, against the test's fake server."""
    model = OpenAIChat(
        "gpt-4.1-mini",
        base_url=os.environ[OPENAI_URL_VARIABLE],
        api_key="test-key-not-secret",
        price=(0.4, 1.6),
    )
    tools = {"quick": quick, "square": square, "deposit": deposit}
    return Agent(model, tools, name="openai-parallel", release="r5")


def broken(n: int) -> str:
    raise ValueError(f"broken tool called with {n}")


TOOLS: dict[str, Callable[..., Any]] = {"deposit": deposit, "square": square, "notify": notify}


def _usage() -> dict[str, Any]:
    return {"tokens": TOKENS_PER_CALL, "cost": COST_PER_CALL}


def _log_model_call(transcript: list[dict[str, Any]]) -> int:
    """Log (run label, step) and return the step: one more than the actions so far."""
    step = 1 + sum(1 for message in transcript if message["role"] == "assistant")
    _append("model_calls.log", transcript[0]["content"], step, os.getpid())
    return step


def planned_model(rounds: int) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """The scripted model: `rounds` x (deposit, square, notify), then the final answer."""

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        step = _log_model_call(transcript)
        observations = [m["content"] for m in transcript if m["role"] == "tool"]
        index = step - 1
        if index >= 3 * rounds:
            # Only deposits (balances) and squares count: notify's observation is ignored.
            balance = observations[3 * (rounds - 1)]
            squares = [observations[3 * r + 1] for r in range(rounds)]
            answer = f"balance {balance}; squares {', '.join(squares)}"
            return {"type": "final", "content": answer, "usage": _usage()}
        round_, phase = divmod(index, 3)
        if phase == 0:
            call = {"name": "deposit", "args": {"amount": AMOUNTS[round_]}}
        elif phase == 1:
            call = {"name": "square", "args": {"x": observations[-1]}}
        else:
            call = {"name": "notify", "args": {"text": f"round {round_ + 1} done"}}
        return {"type": "tool", **call, "usage": _usage()}

    return model


def broken_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Calls the failing tool with new arguments every step (never a repeat)."""
    step = _log_model_call(transcript)
    return {"type": "tool", "name": "broken", "args": {"n": step}, "usage": _usage()}


# 7 steps: 2 rounds, then the answer "balance 12; squares 25, 144".
ledgered = Agent(planned_model(2), TOOLS, name="ledgered", release="r1")
ANSWERS = {"ledgered": "balance 12; squares 25, 144"}

# 13 steps, for killing at random moments (with RUNNER_TEST_TOOL_SLEEP set).
long = Agent(planned_model(4), TOOLS, name="long", release="r2", max_steps=16)
ANSWERS["long"] = "balance 36; squares 25, 144, 529, 1296"

# 2 steps: four calls at once, then "square 9; balance 5".
parallel = Agent(parallel_model, {**TOOLS, "quick": quick}, name="parallel", release="r4")
ANSWERS["parallel"] = "square 9; balance 5"

# Every tool call fails: stops with tool_errors (after 3 steps with the default budget).
failing = Agent(broken_model, {"broken": broken}, name="failing", release="r3")


def gated_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Two calls that wait for a person's approval and one question to a person:
    deposit(5) [approval], ask_human, square(balance), notify(reply) [approval], answer."""
    step = _log_model_call(transcript)
    seen = [m["content"] for m in transcript if m["role"] == "tool"]
    if step == 1:
        call = {"name": "deposit", "args": {"amount": 5}}
    elif step == 2:
        call = {"name": "ask_human", "args": {"question": "Square the balance?"}}
    elif step == 3:
        call = {"name": "square", "args": {"x": seen[0]}}
    elif step == 4:
        call = {"name": "notify", "args": {"text": f"the person said {seen[1]}"}}
    else:
        # notify's observation is not used: after a crash inside it, it is OutcomeUnknown.
        answer = f"balance {seen[0]}; square {seen[2]}; reply {seen[1]}"
        return {"type": "final", "content": answer, "usage": _usage()}
    return {"type": "tool", **call, "usage": _usage()}


# 5 steps; answered "yes", the answer is GATED_ANSWER. deposit and notify need approval.
gated = Agent(
    gated_model,
    {
        "deposit": Tool(deposit, approval=True),
        "ask_human": ask_human,
        "square": square,
        "notify": Tool(notify, approval=True),
    },
    name="gated",
    release="r4",
)
GATED_ANSWER = "balance 5; square 25; reply yes"

not_an_agent = 42


# -- a step of several calls that waits for people; start marks; Ctrl-C in a batch ------------

GATED_BATCH = [
    {"id": "call_s", "name": "square", "args": {"x": "3"}},
    {"id": "call_d", "name": "deposit", "args": {"amount": 5}},
    {"id": "call_n", "name": "notify", "args": {"text": "batch"}},
]


def gated_batch_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Step 1: square (runs unasked), deposit and notify (each needs approval) at once;
    step 2: the answer, from square and deposit only (notify's may be OutcomeUnknown)."""
    step = _log_model_call(transcript)
    if step == 1:
        return {"type": "tool", "calls": GATED_BATCH, "usage": _usage()}
    results = {m["id"]: m["content"] for m in transcript if m["role"] == "tool"}
    answer = f"square {results['call_s']}; deposit {results['call_d']}"
    return {"type": "final", "content": answer, "usage": _usage()}


# 2 steps; with both calls approved the answer is GATED_BATCH_ANSWER. Keys: <id>-1.1 square,
# <id>-1.2 deposit, <id>-1.3 notify.
gated_batch = Agent(
    gated_batch_model,
    {
        "square": square,
        "deposit": Tool(deposit, approval=True),
        "notify": Tool(notify, approval=True),
    },
    name="gated-batch",
    release="r6",
)
GATED_BATCH_ANSWER = "square 9; deposit 5"

# `ledgered` with its plain notify declared `mark_start`: a notify a crash left pending
# without its start mark never started, and runs on resume.
marked = Agent(
    planned_model(2),
    {**TOOLS, "notify": Tool(notify, mark_start=True)},
    name="marked",
    release="r7",
)
MARKED_ANSWER = ANSWERS["ledgered"]  # the same plan: the same answer

# Set by nobody: a blocked call waits on it until its process ends (or GATE_TIMEOUT passes).
_never = threading.Event()


def blocked(n: int) -> str:
    """A sync tool that marks that it started (`started-<n>`), then blocks on an event no one
    sets: Ctrl-C must give the run back without waiting for it."""
    (ledger_folder() / f"started-{n}").touch()
    _never.wait(GATE_TIMEOUT)
    return f"blocked {n} ended"


def blocked_batch_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Step 1: two blocked calls at once; step 2: the answer, their observations joined."""
    step = _log_model_call(transcript)
    if step == 1:
        calls = [{"id": f"call_{n}", "name": "blocked", "args": {"n": n}} for n in (1, 2)]
        return {"type": "tool", "calls": calls, "usage": _usage()}
    results = [m["content"] for m in transcript if m["role"] == "tool"]
    return {"type": "final", "content": " | ".join(results), "usage": _usage()}


blocked_batch = Agent(blocked_batch_model, {"blocked": blocked}, name="blocked", release="r8")
