"""Acceptance: Ctrl-C (a real SIGINT) while a step's calls run at once on threads.

The calls (agents.py `blocked_batch`) block on an event nobody sets. Python cannot stop a
thread, so the runner does not try: it gives the run back at once and the process exits
130, its calls' threads ending with it. A resume settles the calls as interrupted ones (by
their declarations: plain tools are not run again), and says so: interrupted, not crashed.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.conditions import scaled

from .agents import GATE_TIMEOUT
from .harness import TIMEOUT, agent_ref, cli, cli_env, described, journal, run_row, start, wait_for

# Far below the time the blocked calls would take to end by themselves (GATE_TIMEOUT): an
# exit within it is an exit that did not wait for them.
PROMPTLY = GATE_TIMEOUT / 3


@pytest.mark.interrupts
def test_ctrl_c_in_a_step_of_parallel_calls_gives_the_run_back_at_once(
    db_url: str, ledger: Path
) -> None:
    run_id = "ctrl-batch"
    process = start("run", agent_ref("blocked_batch"), run_id, "--id", run_id,
                    env=cli_env(db_url, ledger), cwd=ledger)  # fmt: skip
    try:
        # Both calls are in flight, each on its own thread, blocked.
        wait_for(lambda: all((ledger / f"started-{n}").exists() for n in (1, 2)),
                 TIMEOUT, "both calls to start")  # fmt: skip
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=scaled(TIMEOUT))
        took = time.monotonic() - interrupted
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, (stdout, stderr)
    assert took < PROMPTLY, f"Ctrl-C took {took:.1f}s: it waited for the blocked calls"
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == (
        f"interrupted: run {run_id} was released unfinished; continue it with "
        f"`runner resume {run_id}`"
    )
    row = run_row(db_url, run_id)
    assert (row["status"], row["lease_owner"], row["resumes"]) == ("queued", None, 0)
    # Neither outcome was recorded: the threads were left to the process's end.
    assert [r["kind"] for r in journal(db_url, run_id)] == ["task", "action", "action"]

    resumed = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    outcomes = [r for r in journal(db_url, run_id) if r["kind"] == "observation"]
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert outcome["is_error"]
        content = outcome["content"]
        assert content.startswith("OutcomeUnknown: blocked was interrupted"), content
        assert "crash" not in content, content
    assert run_row(db_url, run_id)["resumes"] == 0  # given back, never taken over
