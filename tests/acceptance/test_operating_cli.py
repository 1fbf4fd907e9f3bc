"""Operating runs with the real `runner` command: a crash loop made by real SIGKILLs, then
revived; a fork of a SIGKILLed run; Ctrl-C (a real SIGINT); live progress and colours on a
real terminal (a pty); `module:attr` from the current folder; replay's exit codes."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conditions import scaled

from .agents import ANSWERS
from .harness import (
    KILLED,
    RUNNER,
    TIMEOUT,
    CrashHistory,
    agent_ref,
    check_effects,
    check_journal,
    cli,
    cli_env,
    described,
    effects,
    journal,
    notices,
    run_row,
    start,
    tool_calls,
    wait_for,
)

ANSWER = ANSWERS["ledgered"]


def journal_without(rows: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    """The journal as an uninterrupted run would have it: without `kind`, seq renumbered."""
    kept = [dict(row) for row in rows if row["kind"] != kind]
    for seq, row in enumerate(kept):
        row["seq"] = seq
    return kept


def test_four_killed_resumes_make_a_crash_loop_that_a_revival_ends(
    db_url: str, ledger: Path
) -> None:
    history = CrashHistory(db_url, ledger, "loop")
    killed = cli("run", agent_ref("ledgered"), "loop", "--id", "loop", db_url=db_url,
                 ledger=ledger, fault="during_tool@1")  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    history.crashed()
    for _ in range(4):  # each dies inside the deposit, before its result is journaled
        again = cli("resume", "loop", db_url=db_url, ledger=ledger, fault="during_tool@1")
        assert again.returncode == KILLED, described(again)
        history.crashed()
    given_up = cli("resume", "loop", db_url=db_url, ledger=ledger)
    assert given_up.returncode == 3, described(given_up)
    row = run_row(db_url, "loop")
    assert (row["status"], row["stop_reason"]) == ("finished", "crash_loop")
    assert row["error"].startswith(
        "resumed 4 times in a row without a new journal entry (max_resumes 3): each time, its "
        "last owner had died without releasing the run"
    )
    assert "`runner resume loop --max-resumes N` continues it" in given_up.stderr
    shown = cli("show", "loop", db_url=db_url, ledger=ledger).stdout
    assert "given up: taken over too many times in a row without progress" in shown
    assert "kept killing" not in shown + row["error"]

    revived = cli("resume", "loop", "--max-resumes", "5", db_url=db_url, ledger=ledger)
    assert revived.returncode == 0, described(revived)
    assert revived.stdout == ANSWER + "\n"
    rows = journal(db_url, "loop")
    (mark,) = [r for r in rows if r["kind"] == "revived"]
    assert mark["args"]["stop_reason"] == "crash_loop" and mark["args"]["budgets"] == {}
    assert mark["role"] is None  # never shown to the model
    check_journal(journal_without(rows, "revived"))
    check_effects(ledger, rows, "loop")  # the deposit took effect once, under its key
    assert [key for key, *_ in effects(ledger, "loop")] == ["loop-1", "loop-4"]
    history.check_model_calls()
    after = run_row(db_url, "loop")
    assert (after["stop_reason"], after["output"], after["stalled_resumes"]) == (
        "final", ANSWER, 0,
    )  # fmt: skip


def test_a_run_stopped_at_its_step_cap_is_revived_after_a_sigkill(
    db_url: str, ledger: Path
) -> None:
    killed = cli("run", agent_ref("ledgered"), "capped", "--id", "capped", "--max-steps", "4",
                 db_url=db_url, ledger=ledger, fault="during_tool@2")  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    capped = cli("resume", "capped", db_url=db_url, ledger=ledger)
    assert capped.returncode == 3, described(capped)
    assert run_row(db_url, "capped")["stop_reason"] == "max_steps"
    refused = cli("resume", "capped", "--max-steps", "4", db_url=db_url, ledger=ledger)
    assert refused.returncode == 2, described(refused)
    assert "max_steps 4 leaves no step: the run has taken 4" in refused.stderr
    revived = cli("resume", "capped", "--max-steps", "8", db_url=db_url, ledger=ledger)
    assert revived.returncode == 0, described(revived)
    assert revived.stdout == ANSWER + "\n"
    rows = journal(db_url, "capped")
    assert [r["args"]["budgets"] for r in rows if r["kind"] == "revived"] == [{"max_steps": [4, 8]}]
    check_journal(journal_without(rows, "revived"))
    check_effects(ledger, rows, "capped")
    listed = json.loads(cli("list", "--json", db_url=db_url, ledger=ledger).stdout)
    assert [(r["id"], r["stop_reason"], r["steps"]) for r in listed] == [("capped", "final", 7)]


def test_a_fork_of_a_sigkilled_run(db_url: str, ledger: Path) -> None:
    killed = cli("run", agent_ref("ledgered"), "parent", "--id", "parent", db_url=db_url,
                 ledger=ledger, fault="after_observation_commit@3")  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    before = journal(db_url, "parent")
    parent_row = run_row(db_url, "parent")
    forked = cli("fork", "parent", "--at-step", "2", "--id", "fk", db_url=db_url, ledger=ledger)
    assert forked.returncode == 0, described(forked)
    assert forked.stderr.splitlines()[0] == "run fk (forked from parent at step 2)"
    # The fork's deposits are its own (a new key, a balance of its own): 7, not 5 + 7.
    assert forked.stdout == "balance 7; squares 25, 49\n"
    assert journal(db_url, "parent") == before and run_row(db_url, "parent") == parent_row
    rows = journal(db_url, "fk")
    assert [r["idempotency_key"] for r in rows if r["kind"] == "action"] == [
        "parent-1", "parent-2", "fk-3", "fk-4", "fk-5", "fk-6",
    ]  # fmt: skip
    assert [r["lease_epoch"] for r in rows[:5]] == [0] * 5
    fork_row = run_row(db_url, "fk")
    assert (fork_row["forked_from_id"], fork_row["forked_at_step"]) == ("parent", 2)
    # The copied calls never ran for the fork; its own calls ran under its own keys.
    assert sorted((c.tool, c.step) for c in tool_calls(ledger, "fk")) == [
        ("deposit", 4), ("notify", 3), ("notify", 6), ("square", 5),
    ]  # fmt: skip
    assert notices(ledger, "parent") == [(3, 1)]
    # The parent is still there to resume, and ends as it would have.
    resumed = cli("resume", "parent", db_url=db_url, ledger=ledger)
    assert resumed.stdout == ANSWER + "\n", described(resumed)
    check_effects(ledger, journal(db_url, "parent"), "parent")


@pytest.mark.interrupts
def test_ctrl_c_releases_the_run_and_says_how_to_resume_it(db_url: str, ledger: Path) -> None:
    gate = ledger / "gate"
    process = start("run", agent_ref("ledgered"), "ctrl", "--id", "ctrl",
                    env=cli_env(db_url, ledger, gate=gate), cwd=ledger)  # fmt: skip
    try:
        # Held at the gate inside the first tool call, its action committed.
        wait_for(lambda: any(r["kind"] == "action" for r in journal(db_url, "ctrl")),
                 what="the first action")  # fmt: skip
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=scaled(TIMEOUT))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    assert stderr.splitlines()[-1] == (
        "interrupted: run ctrl was released unfinished; continue it with `runner resume ctrl`"
    )
    row = run_row(db_url, "ctrl")
    assert (row["status"], row["lease_owner"], row["resumes"]) == ("queued", None, 0)
    gate.touch()
    resumed = cli("resume", "ctrl", db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout == ANSWER + "\n"
    assert run_row(db_url, "ctrl")["resumes"] == 0  # given back, never taken over


def in_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """`runner ARGS` with a pty for its stdin, stdout and stderr: its exit code and output."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, nothing else
        os.chdir(cwd)
        os.execve(str(RUNNER), [str(RUNNER), *args], env)
    chunks = []
    give_up = time.monotonic() + TIMEOUT
    while time.monotonic() < give_up:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace")


def terminal_env(db_url: str, ledger: Path, **extra: str) -> dict[str, str]:
    env = cli_env(db_url, ledger, sleep=0.2)
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    env.update({"TERM": "xterm-256color", "COLUMNS": "200"}, **extra)
    return env


def test_a_terminal_shows_the_running_step_live_and_a_final_line(db_url: str, ledger: Path) -> None:
    args = ["run", agent_ref("ledgered"), "live", "--id", "live"]
    code, shown = in_a_terminal(args, terminal_env(db_url, ledger), ledger)
    assert code == 0, shown
    assert "step 1  deposit(amount=5)  running" in shown  # the call in flight
    assert 'step 2  square(x="5")  running' in shown
    assert "step 1  tool deposit  ok  tokens 10" in shown  # each finished step, above it
    assert "stopped: final after 7 steps, 70 tokens, cost 0.007, " in shown
    assert shown.rstrip().endswith(ANSWER)
    assert "Traceback" not in shown


def test_statuses_are_coloured_on_a_terminal_unless_no_color(db_url: str, ledger: Path) -> None:
    assert cli("run", agent_ref("ledgered"), "c", "--id", "c", db_url=db_url,
               ledger=ledger).returncode == 0  # fmt: skip
    code, coloured = in_a_terminal(["list"], terminal_env(db_url, ledger), ledger)
    assert code == 0, coloured
    assert "\x1b[32mfinished" in coloured and "\x1b[32mfinal" in coloured
    code, plain = in_a_terminal(["list"], terminal_env(db_url, ledger, NO_COLOR="1"), ledger)
    assert code == 0, plain
    assert "finished" in plain and "\x1b[32m" not in plain
    piped = cli("list", db_url=db_url, ledger=ledger)
    assert "\x1b" not in piped.stdout and "finished" in piped.stdout


def test_a_module_reference_from_the_folder_that_holds_it(db_url: str, ledger: Path) -> None:
    folder = ledger / "project"
    folder.mkdir()
    (folder / "my_agent.py").write_text(
        "from runner import Agent\n\n"
        "def model(transcript):\n"
        "    return {'type': 'final', 'content': 'from my folder'}\n\n"
        "agent = Agent(model, name='mine')\n"
    )
    env = cli_env(db_url, ledger)
    env.pop("PYTHONPATH", None)
    done = cli("run", "my_agent:agent", "t", "--id", "here", env=env, db_url=None,
               ledger=ledger, cwd=folder)  # fmt: skip
    assert done.returncode == 0, described(done)
    assert done.stdout == "from my folder\n"
    assert run_row(db_url, "here")["agent"] == "my_agent:agent"
    elsewhere = cli("run", "my_agent:agent", "t", "--id", "there", env=env, db_url=None,
                    ledger=ledger)  # fmt: skip
    assert elsewhere.returncode == 1  # not found outside its folder: one line, exit 1
    assert "no module named 'my_agent'" in elsewhere.stderr


def test_replay_exits_0_when_the_agent_agrees_and_5_when_it_differs(
    db_url: str, ledger: Path
) -> None:
    assert cli("run", agent_ref("ledgered"), "prod", "--id", "prod", db_url=db_url,
               ledger=ledger).returncode == 0  # fmt: skip
    calls = len(tool_calls(ledger, "prod"))
    agrees = cli("replay", "prod", db_url=db_url, ledger=ledger)
    assert agrees.returncode == 0, described(agrees)
    assert agrees.stdout.splitlines() == [
        f"replayed run prod against {agent_ref('ledgered')}: 7 recorded steps, no model called, "
        "no tool run",
        "agrees: the agent takes every recorded step and its stop (final) again",
    ]
    changed = ledger / "changed.py"
    changed.write_text(
        "from runner import Agent\n\n"
        "def deposit(amount, idempotency_key):\n    return 'unused'\n\n"
        "agent = Agent(lambda transcript: None, {'deposit': deposit})\n"
    )
    differs = cli("replay", "prod", "--agent", f"{changed}:agent", db_url=db_url, ledger=ledger)
    assert differs.returncode == 5, described(differs)
    assert differs.stdout.splitlines()[1:] == [
        "differs at step 2:",
        '  recorded  the run called square({"x": "5"})',
        "  now       the agent has no tool square: it would observe LookupError: unknown tool "
        "square",
    ]
    data = json.loads(
        cli("replay", "prod", "--agent", f"{changed}:agent", "--json", db_url=db_url,
            ledger=ledger).stdout
    )  # fmt: skip
    assert (data["agrees"], data["step"]) == (False, 2)
    assert len(tool_calls(ledger, "prod")) == calls  # nothing ran
    full = cli("show", "prod", "--full", db_url=db_url, ledger=ledger)
    assert full.returncode == 0 and "<- notify [ok]  sent" in full.stdout
    assert subprocess.run([str(RUNNER), "replay", "--help"], capture_output=True).returncode == 0


@pytest.mark.parametrize("command", ["fork", "replay"])
def test_unknown_runs_are_one_line_errors(command: str, db_url: str, ledger: Path) -> None:
    args = ["fork", "nope", "--at-step", "1"] if command == "fork" else ["replay", "nope"]
    result = cli(*args, db_url=db_url, ledger=ledger)
    assert result.returncode == 1, described(result)
    assert result.stderr == "Error: no run with id nope\n"


def test_a_queued_fork_is_left_to_a_worker(db_url: str, ledger: Path) -> None:
    assert cli("run", agent_ref("ledgered"), "p", "--id", "p", db_url=db_url,
               ledger=ledger).returncode == 0  # fmt: skip
    queued = cli("fork", "p", "--at-step", "3", "--queue", "--json", "--max-steps", "9",
                 db_url=db_url, ledger=ledger)  # fmt: skip
    assert queued.returncode == 0, described(queued)
    data = json.loads(queued.stdout)
    assert (data["status"], data["state"], data["forked_from_id"], data["forked_at_step"]) == (
        "queued", "queued", "p", 3,
    )  # fmt: skip
    assert data["budgets"]["max_steps"] == 9 and data["steps"] == 3
    served = cli("worker", "--once", db_url=db_url, ledger=ledger)
    assert served.returncode == 0, described(served)
    row = run_row(db_url, data["id"])
    assert (row["stop_reason"], row["output"]) == ("final", "balance 7; squares 25, 49")
