"""Acceptance: a plain tool declared `mark_start`, its process SIGKILLed between the commit
of its call and the call itself, and just after its start mark, then resumed.

Without a start mark the runner cannot tell a call that never started from one that died
half done: a plain tool's pending call is reported `OutcomeUnknown` (tests/acceptance/
test_crash_resume.py keeps that default). With one, a pending call that has no mark never
started, and runs; one that has its mark may have, and stays unknown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .agents import MARKED_ANSWER
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
    tool_steps,
)

ANSWER = MARKED_ANSWER
NOTIFY_STEP = 3  # the plan: deposit, square, notify, ...


@pytest.mark.parametrize("fault", ["after_action_commit@3", "before_start_commit@1"])
def test_a_call_killed_before_its_start_mark_runs_on_resume(
    fault: str, db_url: str, ledger: Path
) -> None:
    run_id = "never-started"
    killed = cli("run", agent_ref("marked"), run_id, "--id", run_id, db_url=db_url,
                 ledger=ledger, fault=fault)  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    history = CrashHistory(db_url, ledger, run_id)
    history.crashed()
    before = journal(db_url, run_id)
    check_journal(before, finished=False)
    assert before[-1]["kind"] == "action" and before[-1]["tool"] == "notify"
    assert notices(ledger, run_id) == []  # it never started

    resumed = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout == ANSWER + "\n"
    rows, _asked = check_finished(db_url, run_id, ANSWER, ledger, history)
    notify = tool_steps(rows, "notify")[NOTIFY_STEP]
    assert (notify["is_error"], notify["content"]) == (False, "sent")  # run, not unknown
    assert [step for step, _ in notices(ledger, run_id)] == [NOTIFY_STEP, 6]
    marks = [r for r in rows if r["kind"] == "start"]
    assert [(r["step"], r["tool"]) for r in marks] == [(3, "notify"), (6, "notify")]


def test_a_call_killed_after_its_start_mark_stays_unknown(db_url: str, ledger: Path) -> None:
    run_id = "maybe-started"
    killed = cli("run", agent_ref("marked"), run_id, "--id", run_id, db_url=db_url,
                 ledger=ledger, fault="after_start_commit@1")  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    history = CrashHistory(db_url, ledger, run_id)
    history.crashed()
    before = journal(db_url, run_id)
    assert [r["kind"] for r in before[-2:]] == ["action", "start"]
    assert notices(ledger, run_id) == []  # killed before the call: but nothing can tell

    resumed = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout == ANSWER + "\n"
    rows, _asked = check_finished(db_url, run_id, ANSWER, ledger, history)
    notify = tool_steps(rows, "notify")[NOTIFY_STEP]
    assert notify["is_error"]
    assert notify["content"].startswith("OutcomeUnknown: notify was interrupted")
    assert [step for step, _ in notices(ledger, run_id)] == [6]  # step 3's never re-run
