"""Running the real `runner` command and reading what really happened.

Shared by the acceptance tests: start the CLI as a subprocess (optionally armed to SIGKILL
itself at a fault point), read the journal straight from the entries table, read the test
agents' ledgers, and check the invariants a crash must never break.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from runner.sql.database import open_engine
from runner.sql.schema import entries, runs
from tests import forked_runner
from tests.conditions import GENEROUS, scaled, wait_until
from tests.forked_runner import PIPE, Forked

from .agents import GATE_VARIABLE, LEDGER_VARIABLE, SLEEP_VARIABLE

RUNNER = forked_runner.RUNNER  # the console script, for the tests that exec it
AGENTS = Path(__file__).with_name("agents.py")
KILLED = -signal.SIGKILL
TIMEOUT = 90

ACTION_KINDS = ("action", "final", "refused")


def agent_ref(name: str) -> str:
    return f"{AGENTS}:{name}"


def cli_env(
    db_url: str | None,
    ledger: Path,
    *,
    fault: str | None = None,
    sleep: float | None = None,
    gate: Path | None = None,
) -> dict[str, str]:
    """The environment of a `runner` subprocess: the database, the ledgers, a fault."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    env[LEDGER_VARIABLE] = str(ledger)
    if db_url is not None:
        env["RUNNER_DATABASE_URL"] = db_url
    if fault is not None:
        env["RUNNER_FAULT"] = fault
    if sleep is not None:
        env[SLEEP_VARIABLE] = str(sleep)
    if gate is not None:
        env[GATE_VARIABLE] = str(gate)
    return env


def cli(
    *args: str,
    db_url: str | None,
    ledger: Path,
    fault: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `runner ARGS` to its end (or its death) and capture what it printed."""
    environment = env if env is not None else cli_env(db_url, ledger, fault=fault)
    return run_command(*args, env=environment, cwd=cwd or ledger)


def run_command(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """`runner ARGS` to its end (or its death), its output captured (forked from a process
    that has imported runner and the frameworks: tests/forked_runner.py)."""
    return forked_runner.run(list(args), env=env, cwd=cwd, timeout=scaled(timeout))


def start(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str] | Forked:
    """`runner ARGS` started, its output on text pipes (tests/forked_runner.py)."""
    return forked_runner.spawn(list(args), env=env, cwd=cwd, stdout=PIPE, stderr=PIPE)


def described(result: subprocess.CompletedProcess[str] | Any) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def one_line_error(stderr: str) -> str:
    """The single line an error prints on stderr, checked to be one line and no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    assert lines[0].startswith("Error: "), lines[0]
    return lines[0]


def wait_for(predicate: Any, timeout: float = GENEROUS, what: str = "condition") -> None:
    wait_until(predicate, timeout=timeout, what=what, every=0.01)


# -- the database, read directly ------------------------------------------------------------


def journal(db_url: str, run_id: str) -> list[dict[str, Any]]:
    """The run's rows in the entries table, in seq order."""
    engine = open_engine(db_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(entries).where(entries.c.run_id == run_id).order_by(entries.c.seq)
            )
            return [dict(row._mapping) for row in rows]
    finally:
        engine.dispose()


def find_row(db_url: str, run_id: str) -> dict[str, Any] | None:
    engine = open_engine(db_url)
    try:
        with engine.connect() as connection:
            row = connection.execute(select(runs).where(runs.c.id == run_id)).first()
            return None if row is None else dict(row._mapping)
    finally:
        engine.dispose()


def run_row(db_url: str, run_id: str) -> dict[str, Any]:
    row = find_row(db_url, run_id)
    assert row is not None, f"no run {run_id}"
    return row


def committed_steps(db_url: str, run_id: str) -> set[int]:
    """Steps whose action (the model's answer for the step) is in the journal."""
    return {row["step"] for row in journal(db_url, run_id) if row["kind"] in ACTION_KINDS}


def check_journal(rows: list[dict[str, Any]], *, finished: bool = True) -> None:
    """No gap and no duplicate: seq 0..n-1, steps 1..N in order, each step's entries once.

    A tool step is its action(s), one per call (keys `<run_id>-<step>`, or `.<n>` in a step
    of several calls); then the waits of the calls that need a person (in call order); then
    one answer per wait, in any order; then each call's observation exactly once, in any
    order, a call of a `mark_start` tool with its start mark(s) before it. The last step of
    an unfinished run may stop anywhere in that.
    """
    assert [row["seq"] for row in rows] == list(range(len(rows))), "seq has a gap"
    if not rows and not finished:
        return  # killed before its first entry
    assert rows and rows[0]["kind"] == "task" and rows[0]["step"] == 0
    per_step: dict[int, list[dict[str, Any]]] = {}
    for row in rows[1:]:
        per_step.setdefault(row["step"], []).append(row)
    steps = sorted(per_step)
    assert steps == list(range(1, len(steps) + 1)), f"steps are not contiguous: {steps}"
    assert [row["step"] for row in rows] == sorted(row["step"] for row in rows)
    for step in steps:
        rows_of_step = per_step[step]
        if rows_of_step[0]["kind"] == "response":  # a framework's whole response: one, first
            rows_of_step = rows_of_step[1:]
            assert rows_of_step and rows_of_step[0]["kind"] == "action", (step, "response")
        kinds = [row["kind"] for row in rows_of_step]
        complete = finished or step != steps[-1]
        if kinds[0] == "action":
            _check_calls(step, rows_of_step, complete)
        else:
            assert step == steps[-1], f"step {step} ({kinds}) ended the run but is not last"
            assert kinds in (["final"], ["refused"]), (step, kinds)


def _leading(rows: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    n = 0
    while n < len(rows) and rows[n]["kind"] == kind:
        n += 1
    return rows[:n]


def _check_calls(step: int, rows: list[dict[str, Any]], complete: bool) -> None:
    """One tool step's rows: actions, waits, answers, then start marks and observations."""
    kinds = [row["kind"] for row in rows]
    actions = _leading(rows, "action")
    waits = _leading(rows[len(actions) :], "wait")
    answers = _leading(rows[len(actions) + len(waits) :], "answer")
    tail = rows[len(actions) + len(waits) + len(answers) :]
    assert all(row["kind"] in ("start", "observation") for row in tail), (step, kinds)
    keys = [row["idempotency_key"] for row in actions]
    waited = [row["idempotency_key"] for row in waits]
    assert waited == [key for key in keys if key in waited], (step, "waits out of call order")
    answered = [row["idempotency_key"] for row in answers]
    assert len(answered) == len(set(answered)) and set(answered) <= set(waited), (step, kinds)
    if complete:
        assert set(answered) == set(waited), (step, kinds)
    if set(answered) != set(waited):
        assert not tail, f"step {step} ran calls before every answer was in: {kinds}"
    outcomes = [row for row in tail if row["kind"] == "observation"]
    if complete:
        assert len(outcomes) == len(actions), (step, kinds)
    else:
        assert len(outcomes) <= len(actions), (step, kinds)
    observed_at = {row["idempotency_key"]: row["seq"] for row in outcomes}
    for mark in (row for row in tail if row["kind"] == "start"):
        assert mark["idempotency_key"] in keys, mark
        assert mark["seq"] < observed_at.get(mark["idempotency_key"], mark["seq"] + 1), mark
    _check_keys(step, actions, outcomes)


def _check_keys(step: int, actions: list[dict[str, Any]], outcomes: list[dict[str, Any]]) -> None:
    """Each call has the key of its place in the step; each observation answers one call."""
    by_key = {}
    for n, action in enumerate(actions, 1):
        if action["action_type"] != "tool":
            assert len(actions) == 1 and action["idempotency_key"] is None, action
            continue
        suffix = "" if len(actions) == 1 else f".{n}"
        assert action["idempotency_key"] == f"{action['run_id']}-{step}{suffix}", action
        by_key[action["idempotency_key"]] = action
    answered = [row["idempotency_key"] for row in outcomes]
    assert len(answered) == len(set(answered)), f"a call of step {step} was observed twice"
    for row in outcomes:
        if row["idempotency_key"] is None:  # the error shown for malformed output
            assert not by_key, row
            continue
        action = by_key[row["idempotency_key"]]
        assert (row["tool"], row["call_id"]) == (action["tool"], action["call_id"])


def tool_steps(rows: list[dict[str, Any]], tool: str) -> dict[int, dict[str, Any]]:
    """Each step calling `tool`, mapped to its observation row."""
    return {
        row["step"]: row for row in rows if row["kind"] == "observation" and row["tool"] == tool
    }


# -- the agents' ledgers --------------------------------------------------------------------


def _lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


@dataclass(frozen=True)
class ModelCall:
    label: str
    step: int
    pid: int


@dataclass(frozen=True)
class ToolCall:
    tool: str
    run_id: str
    step: int
    attempt: int
    key: str
    pid: int


def model_calls(ledger: Path, label: str) -> list[ModelCall]:
    return [
        ModelCall(f[0], int(f[1]), int(f[2]))
        for f in _lines(ledger / "model_calls.log")
        if f[0] == label
    ]


def tool_calls(ledger: Path, run_id: str, tool: str | None = None) -> list[ToolCall]:
    calls = [
        ToolCall(f[0], f[1], int(f[2]), int(f[3]), f[4], int(f[5]))
        for f in _lines(ledger / "calls.log")
    ]
    return [c for c in calls if c.run_id == run_id and (tool is None or c.tool == tool)]


def notices(ledger: Path, run_id: str) -> list[tuple[int, int]]:
    """(step, attempt) of each notice the non-idempotent tool really sent for the run."""
    return [(int(f[1]), int(f[2])) for f in _lines(ledger / "notices.log") if f[0] == run_id]


def effects(ledger: Path, run_id: str) -> list[tuple[str, int, int, int]]:
    """(key, step, amount, balance) of each effect of the key-aware tool, by step."""
    path = ledger / "effects.db"
    if not path.exists():
        return []
    db = sqlite3.connect(path)
    try:
        return [
            (key, step, amount, balance)
            for key, step, amount, balance in db.execute(
                "SELECT key, step, amount, balance FROM effects WHERE run_id = ? ORDER BY step",
                (run_id,),
            )
        ]
    finally:
        db.close()


# -- a run killed and resumed ---------------------------------------------------------------


@dataclass
class CrashHistory:
    """What the journal held at each crash, to tell which model calls were allowed."""

    db_url: str
    ledger: Path
    run_id: str
    # (model calls logged so far, steps whose action was committed) at each crash
    crashes: list[tuple[int, set[int]]] = field(default_factory=list)

    def crashed(self) -> None:
        calls = len(model_calls(self.ledger, self.run_id))
        self.crashes.append((calls, committed_steps(self.db_url, self.run_id)))

    def check_model_calls(self) -> Counter[int]:
        """The model was never asked again for a step whose action was recorded.

        Returns how often each step was asked for: twice (or more) only for a step whose
        process died before committing its action.
        """
        calls = model_calls(self.ledger, self.run_id)
        bounds = [0, *(count for count, _ in self.crashes), len(calls)]
        recorded_before: set[int] = set()
        lost: Counter[int] = Counter()
        for i in range(len(bounds) - 1):
            segment = [call.step for call in calls[bounds[i] : bounds[i + 1]]]
            assert len(segment) == len(set(segment)), f"one process asked twice: {segment}"
            again = set(segment) & recorded_before
            assert not again, f"the model was asked again for recorded steps {sorted(again)}"
            if i < len(self.crashes):
                recorded_before = self.crashes[i][1]
                lost.update(step for step in segment if step not in recorded_before)
        asked = Counter(call.step for call in calls)
        final_steps = committed_steps(self.db_url, self.run_id)
        assert set(asked) == final_steps, (sorted(asked), sorted(final_steps))
        for step, count in asked.items():
            assert count == 1 + lost[step], (step, count, lost[step])
        return asked


def check_effects(ledger: Path, rows: list[dict[str, Any]], run_id: str) -> None:
    """Each tool's effects against the journal, whatever crashed where.

    - deposit (key-aware): exactly one effect per deposit step, under the step's key;
      re-invocations (attempt 2+) only happen with the same key.
    - square (idempotent): may have run more than once, always with the step's key.
    - notify (plain): never ran twice for one step; an OutcomeUnknown observation is the
      only way the model learns of a notify that was interrupted.
    - quick (plain, in the parallel agent's batch): never ran twice either.
    """
    deposits = tool_steps(rows, "deposit")
    # Each tool's call of a step has its own key (`<run_id>-<step>`, or `.n` in a batch).
    keys = {
        (row["step"], row["tool"]): row["idempotency_key"]
        for row in rows
        if row["kind"] == "action" and row["action_type"] == "tool"
    }
    found = effects(ledger, run_id)
    assert [step for _, step, _, _ in found] == sorted(deposits), (found, sorted(deposits))
    for key, step, _amount, balance in found:
        assert key == keys[(step, "deposit")]
        observation = deposits[step]
        assert not observation["is_error"], observation["content"]
        assert observation["content"] == str(balance)
    for name in ("deposit", "square", "notify", "quick"):
        by_step: dict[int, list[ToolCall]] = {}
        for call in tool_calls(ledger, run_id, name):
            by_step.setdefault(call.step, []).append(call)
        observed = tool_steps(rows, name)
        pending = {
            row["step"]
            for row in rows
            if row["kind"] == "action" and row["tool"] == name and row["step"] not in observed
        }
        assert set(by_step) <= set(observed) | pending, (name, sorted(by_step))
        # A result the model was shown came from a real call of the tool.
        shown = {step for step, row in observed.items() if not row["is_error"]}
        assert shown <= set(by_step), (name, sorted(shown - set(by_step)))
        for step, calls in by_step.items():
            assert all(call.key == keys[(step, name)] for call in calls)
            attempts = [call.attempt for call in calls]
            # Each claim of the run makes its own attempt: never two with one number.
            assert len(attempts) == len(set(attempts)), (name, step, attempts)
            if name in ("notify", "quick"):  # plain tools: never run twice for one call
                assert len(calls) == 1, f"{name} ran {len(calls)} times for step {step}"
    sent = notices(ledger, run_id)
    assert len(sent) == len({step for step, _ in sent}), f"a notice was sent twice: {sent}"
    for step, observation in tool_steps(rows, "notify").items():
        if observation["is_error"]:
            assert observation["content"].startswith("OutcomeUnknown"), observation["content"]
        else:
            assert observation["content"] == "sent"
            assert [s for s, _ in sent].count(step) == 1


def check_finished(
    db_url: str, run_id: str, answer: str, ledger: Path, history: CrashHistory | None = None
) -> tuple[list[dict[str, Any]], Counter[int]]:
    """The run finished with `answer`, its journal and ledgers intact."""
    row = run_row(db_url, run_id)
    assert row["status"] == "finished", row
    assert (row["stop_reason"], row["output"]) == ("final", answer), row
    assert row["lease_owner"] is None
    rows = journal(db_url, run_id)
    check_journal(rows)
    assert row["steps"] == rows[-1]["steps"] == rows[-1]["step"]
    assert row["tokens"] == rows[-1]["tokens"]
    check_effects(ledger, rows, run_id)
    asked = (history or CrashHistory(db_url, ledger, run_id)).check_model_calls()
    return rows, asked
