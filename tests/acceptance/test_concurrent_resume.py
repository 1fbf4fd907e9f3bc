"""Two `runner resume` processes on one run: exactly one proceeds, the run finishes right.

A crashed run (its worker SIGKILLed after the first action commit) is resumed by two
processes started together. The tools of both wait at a gate file the test opens only once
one of them has exited, so the winner is still holding the run when the loser tries to take
it, however the start-up of the two processes is scheduled.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .harness import (
    KILLED,
    CrashHistory,
    agent_ref,
    check_finished,
    cli,
    cli_env,
    described,
    one_line_error,
    run_row,
    start,
    tool_calls,
    wait_for,
)


def _crashed_run(db_url: str, ledger: Path, run_id: str) -> CrashHistory:
    """A run whose worker died after committing step 1's action (deposit, pending)."""
    killed = cli(
        "run", agent_ref("ledgered"), run_id, "--id", run_id,
        db_url=db_url, ledger=ledger, fault="after_action_commit@1",
    )  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    history = CrashHistory(db_url, ledger, run_id)
    history.crashed()
    return history


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = proc.communicate(timeout=60)
    return proc.returncode, stdout, stderr


def test_two_resumes_at_once_one_proceeds(
    db_url: str, ledger: Path, tmp_path: Path, uncrashed: dict[str, str]
) -> None:
    run_id = "twice"
    history = _crashed_run(db_url, ledger, run_id)
    gate = tmp_path / "gate"
    env = cli_env(db_url, ledger, gate=gate)
    procs = [start("resume", run_id, env=env, cwd=ledger) for _ in range(2)]
    try:
        wait_for(
            lambda: any(proc.poll() is not None for proc in procs),
            what="one of the two resumes to give up",
        )
        loser = next(proc for proc in procs if proc.poll() is not None)
        winner = next(proc for proc in procs if proc is not loser)
        # The winner is still running, held at the gate by the pending deposit.
        assert winner.poll() is None
        code, stdout, stderr = _finish(loser)
        assert code == 1, (code, stdout, stderr)
        assert stdout == ""
        line = one_line_error(stderr)
        assert f"run {run_id} is being executed by " in line
        assert f":{winner.pid}:" in line  # named by host:pid:start
        gate.touch()
        code, stdout, stderr = _finish(winner)
    finally:
        gate.touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert code == 0, (code, stdout, stderr)
    assert stdout == uncrashed["ledgered"] + "\n"
    # The loser never touched the run: one resume, one settlement of the pending deposit.
    check_finished(db_url, run_id, uncrashed["ledgered"], ledger, history)
    assert run_row(db_url, run_id)["resumes"] == 1
    assert {c.pid for c in tool_calls(ledger, run_id)} == {winner.pid}
    assert [c.attempt for c in tool_calls(ledger, run_id, "deposit") if c.step == 1] == [2]


def test_steal_fences_out_the_live_worker(
    db_url: str, ledger: Path, tmp_path: Path, uncrashed: dict[str, str]
) -> None:
    """`resume --steal` takes a live worker's run; the old worker can no longer write."""
    run_id = "stolen"
    history = _crashed_run(db_url, ledger, run_id)
    gate = tmp_path / "gate"
    held = start("resume", run_id, env=cli_env(db_url, ledger, gate=gate), cwd=ledger)
    try:
        # The first resume holds the run, waiting at the gate inside step 1's deposit...
        wait_for(lambda: run_row(db_url, run_id)["lease_epoch"] == 2, what="the first claim")
        refused = cli("resume", run_id, db_url=db_url, ledger=ledger)
        assert refused.returncode == 1, described(refused)
        assert "being executed by" in one_line_error(refused.stderr)
        # ... so only --steal takes it over, and finishes it.
        stolen = cli("resume", run_id, "--steal", db_url=db_url, ledger=ledger)
        assert stolen.returncode == 0, described(stolen)
        assert stolen.stdout == uncrashed["ledgered"] + "\n"
        gate.touch()
        code, stdout, stderr = _finish(held)
    finally:
        gate.touch()
        if held.poll() is None:
            held.kill()
            held.communicate()
    # The fenced-out worker ran its deposit (the same key: no second effect), then failed to
    # record it: one line, exit 1, nothing on stdout.
    assert code == 1, (code, stdout, stderr)
    assert stdout == ""
    assert "taken over by another worker" in one_line_error(stderr)
    check_finished(db_url, run_id, uncrashed["ledgered"], ledger, history)
    # Both ran the pending deposit, the thief first (attempt 3), the fenced-out worker after
    # (attempt 2): one effect all the same, checked by check_finished.
    deposits = [(c.attempt, c.pid) for c in tool_calls(ledger, run_id, "deposit") if c.step == 1]
    assert len(deposits) == 2 and deposits[1] == (2, held.pid), deposits
    assert deposits[0][0] == 3
