"""Acceptance: a step of several calls that waits for people, through the real `runner`
command, SIGKILLed while parked, between its answers, after the last answer and before the
run goes on, and as the approved calls start. On SQLite and PostgreSQL (`db_url`).

The agent (`gated_batch` in agents.py) asks in one step for square (no answer needed),
deposit and notify (each needs approval). No call of the step runs before both answers are
in; each call is settled by its own answer; the answer equals an uncrashed run's.
"""

from __future__ import annotations

import json
from pathlib import Path

from .agents import GATED_BATCH_ANSWER
from .harness import (
    KILLED,
    CrashHistory,
    agent_ref,
    check_finished,
    check_journal,
    cli,
    described,
    journal,
    notices,
    one_line_error,
    run_row,
    tool_calls,
    tool_steps,
)


def kinds(db_url: str, run_id: str) -> list[str]:
    return [row["kind"] for row in journal(db_url, run_id)]


def test_each_waiting_call_is_named_and_answered_on_its_own(db_url: str, ledger: Path) -> None:
    run_id = "gb"
    first = cli("run", agent_ref("gated_batch"), run_id, "--id", run_id, db_url=db_url,
                ledger=ledger)  # fmt: skip
    assert (first.returncode, first.stdout) == (4, ""), described(first)
    # Every waiting call is named, each with the commands that answer it.
    for key, question in ((f"{run_id}-1.2", "deposit(amount=5)"),
                          (f"{run_id}-1.3", 'notify(text="batch")')):  # fmt: skip
        assert f"waiting: run {run_id} needs approval of {question}" in first.stderr
        assert f"  runner approve {run_id} --call {key}\n" in first.stderr
    assert kinds(db_url, run_id) == ["task", "action", "action", "action", "wait", "wait"]
    assert tool_calls(ledger, run_id) == []  # not even the call that needs no answer

    shown = cli("show", run_id, db_url=db_url, ledger=ledger)
    assert shown.returncode == 0, described(shown)
    assert f"approval of deposit(amount=5) (call {run_id}-1.2) since" in shown.stdout
    assert f'approval of notify(text="batch") (call {run_id}-1.3) since' in shown.stdout
    as_json = json.loads(cli("show", run_id, "--json", db_url=db_url, ledger=ledger).stdout)
    assert [w["call"] for w in as_json["waits"]] == [f"{run_id}-1.2", f"{run_id}-1.3"]

    unnamed = cli("approve", run_id, db_url=db_url, ledger=ledger)
    assert unnamed.returncode == 1
    assert f"run {run_id} waits for 2 calls: name the one you answer with --call" in (
        one_line_error(unnamed.stderr)
    )
    one = cli("approve", run_id, "--call", f"{run_id}-1.3", "--by", "ann", db_url=db_url,
              ledger=ledger)  # fmt: skip
    assert one.returncode == 0, described(one)
    assert one.stdout.startswith(
        f"run {run_id}: call {run_id}-1.3 approved by ann; the run still waits for 1 call"
    )
    assert run_row(db_url, run_id)["status"] == "waiting"
    twice = cli("approve", run_id, "--call", f"{run_id}-1.3", db_url=db_url, ledger=ledger)
    assert twice.returncode == 1
    assert f"call {run_id}-1.3 was already approved by ann" in one_line_error(twice.stderr)
    still = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert still.returncode == 4, described(still)  # one call still waits: nothing ran
    assert tool_calls(ledger, run_id) == []

    denied = cli("deny", run_id, "--call", f"{run_id}-1.2", "--reason", "not today",
                 db_url=db_url, ledger=ledger)  # fmt: skip
    assert denied.returncode == 0, described(denied)
    assert "the run is queued again" in denied.stdout
    done = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert done.returncode == 0, described(done)
    assert done.stdout == "square 9; deposit Denied: not today\n"
    assert sorted(c.tool for c in tool_calls(ledger, run_id)) == ["notify", "square"]
    rows = journal(db_url, run_id)
    check_journal(rows)
    assert [(r["idempotency_key"], r["answer"]) for r in rows if r["kind"] == "answer"] == [
        (f"{run_id}-1.3", "approved"),
        (f"{run_id}-1.2", "denied"),
    ]
    listed = cli("sql", "SELECT idempotency_key, status FROM tool_calls ORDER BY 1",
                 "--json", db_url=db_url, ledger=ledger)  # fmt: skip
    assert listed.returncode == 0, described(listed)
    assert [(r["idempotency_key"], r["status"]) for r in json.loads(listed.stdout)] == [
        (f"{run_id}-1.1", "done"),
        (f"{run_id}-1.2", "denied"),
        (f"{run_id}-1.3", "done"),
    ]
    approvals = cli("sql", "SELECT idempotency_key, answer FROM approvals ORDER BY 1",
                    "--json", db_url=db_url, ledger=ledger)  # fmt: skip
    assert [(r["idempotency_key"], r["answer"]) for r in json.loads(approvals.stdout)] == [
        (f"{run_id}-1.2", "denied"),
        (f"{run_id}-1.3", "approved"),
    ]


# (command, fault, exit code): each process dies where the fault says, the last finishes.
CHAIN = [
    (("run",), "after_wait_commit@1", KILLED),  # parked: both waits recorded, nothing ran
    (("resume",), None, 4),  # still waiting: nothing is claimed
    (("approve", "--call", "{id}-1.2"), "after_answer_commit@1", KILLED),  # between answers
    (("resume",), None, 4),  # one answer in: still waiting, nothing ran
    (("approve", "--call", "{id}-1.3"), "after_answer_commit@1", KILLED),  # the last answer
    (("resume",), "before_approved_call@1", KILLED),  # after the answers, as a call starts
    (("resume",), None, 0),  # settled by each tool's declaration; the uncrashed answer
]


def test_killed_while_parked_between_answers_and_before_the_run_goes_on(
    db_url: str, ledger: Path
) -> None:
    run_id = "gbc"
    history = CrashHistory(db_url, ledger, run_id)
    for i, (command, fault, expected) in enumerate(CHAIN):
        if command[0] == "run":
            args: tuple[str, ...] = ("run", agent_ref("gated_batch"), run_id, "--id", run_id)
        else:
            args = (command[0], run_id, *(part.format(id=run_id) for part in command[1:]))
        result = cli(*args, db_url=db_url, ledger=ledger, fault=fault)
        assert result.returncode == expected, f"{i} {args} {fault}: {described(result)}"
        if expected == KILLED:
            history.crashed()
        if i < 5:  # until both answers are in, no call of the step has run
            assert tool_calls(ledger, run_id) == [], i
        check_journal(journal(db_url, run_id), finished=False)
        if i == 4:  # the last answer recorded, its process killed: the run is queued
            assert run_row(db_url, run_id)["status"] == "queued"
    assert result.stdout == GATED_BATCH_ANSWER + "\n"

    rows, asked = check_finished(db_url, run_id, GATED_BATCH_ANSWER, ledger, history)
    assert asked == {1: 1, 2: 1}  # the model was never asked again for the step
    step_1 = [r["kind"] for r in rows if r["step"] == 1]
    assert step_1[:7] == ["action"] * 3 + ["wait"] * 2 + ["answer"] * 2
    assert sorted(step_1[7:]) == ["observation"] * 3
    # deposit (key-aware) applied once whatever ran; notify (plain) sent at most once, and
    # when the kill may have come after it started, the model is told its outcome is unknown.
    assert len([c for c in tool_calls(ledger, run_id, "deposit")]) >= 1
    assert len(notices(ledger, run_id)) <= 1
    notify = tool_steps(rows, "notify")[1]
    if not notices(ledger, run_id):
        assert notify["content"].startswith("OutcomeUnknown: notify was interrupted")
    assert run_row(db_url, run_id)["resumes"] == 1  # the one takeover: after the kill in a call
