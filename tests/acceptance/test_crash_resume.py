"""The `runner` command SIGKILLed at each named fault point and at random moments, then resumed.

After every crash the journal has no gap and no duplicate, the model was never asked again
for a step whose action was recorded, the key-aware tool's effect happened once per step,
the non-idempotent tool never ran twice for one step, and the final answer equals an
uncrashed run's. The agents (tests/acceptance/agents.py) keep their own ledgers, outside the
runner's database, of every model call and tool invocation.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conditions import scaled

from .agents import GATED_ANSWER
from .harness import (
    KILLED,
    TIMEOUT,
    CrashHistory,
    agent_ref,
    check_finished,
    check_journal,
    cli,
    cli_env,
    described,
    find_row,
    journal,
    model_calls,
    notices,
    one_line_error,
    run_row,
    start,
    tool_calls,
    tool_steps,
    wait_for,
)


@dataclass(frozen=True)
class Case:
    fault: str  # RUNNER_FAULT for the first process
    step: int  # the step it dies in (ledgered: 1 deposit, 2 square, 3 notify, 4 deposit, ...)
    tool: str  # that step's tool
    attempts: tuple[int, ...]  # the attempts of the tool that really ran for that step
    outcome_unknown: bool = False  # the resumed run shows the model an OutcomeUnknown
    asked_twice: bool = False  # the crash came before the step's action was committed


# One case per fault point and kind of tool where the outcome differs. The chain test below
# adds before_observation_commit and the fault points around the final answer.
CASES = [
    # Before the action commit: the model's answer was lost with the process, so the model
    # is asked again for that step (the only case where it may be).
    Case("before_action_commit@1", 1, "deposit", (1,), asked_twice=True),
    # After the action commit, before the tool ran: a pending call. The key-aware tool is run
    # (attempt 2); the plain one is not (it never ran, but the runner cannot know that).
    Case("after_action_commit@1", 1, "deposit", (2,)),
    Case("after_action_commit@3", 3, "notify", (), outcome_unknown=True),
    # While the tool runs, its effect done but not recorded: the key-aware tool runs again
    # with the same key (its effect stays single), the idempotent one runs again, the plain
    # one does not and the model is told the outcome is unknown.
    Case("during_tool@1", 1, "deposit", (1, 2)),
    Case("during_tool@2", 2, "square", (1, 2)),
    Case("during_tool@3", 3, "notify", (1,), outcome_unknown=True),
    # After the tool returned, before its observation was written: the same as during it.
    Case("after_tool_return@1", 1, "deposit", (1, 2)),
    Case("after_tool_return@3", 3, "notify", (1,), outcome_unknown=True),
    # After the observation commit: nothing is redone.
    Case("after_observation_commit@1", 1, "deposit", (1,)),
]


@pytest.mark.parametrize("case", CASES, ids=[case.fault for case in CASES])
def test_killed_at_fault_point_then_resumed(
    case: Case, db_url: str, ledger: Path, uncrashed: dict[str, str]
) -> None:
    run_id = f"crash-{CASES.index(case)}"
    killed = cli(
        "run", agent_ref("ledgered"), run_id, "--id", run_id,
        db_url=db_url, ledger=ledger, fault=case.fault,
    )  # fmt: skip
    # It really died at the point: SIGKILL, no answer printed.
    assert killed.returncode == KILLED, described(killed)
    assert killed.stdout == ""
    assert f"run {run_id}" in killed.stderr.splitlines()[0]
    history = CrashHistory(db_url, ledger, run_id)
    history.crashed()

    before = journal(db_url, run_id)
    check_journal(before, finished=False)
    recorded_steps = {row["step"] for row in before if row["kind"] in ("action", "final")}
    if case.asked_twice:
        assert case.step not in recorded_steps
    else:
        assert case.step in recorded_steps
    assert max(recorded_steps, default=0) <= case.step

    resumed = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout == uncrashed["ledgered"] + "\n"

    rows, asked = check_finished(db_url, run_id, uncrashed["ledgered"], ledger, history)
    twice = {step for step, count in asked.items() if count > 1}
    assert twice == ({case.step} if case.asked_twice else set())
    assert asked[case.step] == (2 if case.asked_twice else 1)

    row = run_row(db_url, run_id)
    assert row["resumes"] == 1

    observation = tool_steps(rows, case.tool)[case.step]
    ran = tuple(c.attempt for c in tool_calls(ledger, run_id, case.tool) if c.step == case.step)
    assert ran == case.attempts
    if case.outcome_unknown:
        assert observation["is_error"]
        assert observation["content"].startswith("OutcomeUnknown: notify was interrupted")
        assert observation["attempt"] == 2
        # The model saw the error and moved on; the notice went out at most once.
        assert [step for step, _ in notices(ledger, run_id)].count(case.step) == len(ran)
    else:
        assert not observation["is_error"], observation["content"]
        assert observation["attempt"] == (ran[-1] if ran else 1)
    # Every other tool step ran exactly once.
    for call in tool_calls(ledger, run_id):
        if call.step != case.step:
            assert call.attempt == 1, call


def test_killed_right_after_its_start_then_resumed(
    db_url: str, ledger: Path, uncrashed: dict[str, str]
) -> None:
    # The run's row, claimed by the process, and its task are one commit (its start): a
    # process killed just after it leaves a run held by a dead worker, its task journaled
    # and nothing else. The resume takes it over and asks the model for step 1 once.
    # `Runner.run` (the Python API) starts a run so; `runner run` submits it, then runs it.
    run_id = "crash-start"
    script = (
        "import os, sys\n"
        "from runner import Runner\n"
        f"Runner(os.environ['RUNNER_DATABASE_URL']).run({agent_ref('ledgered')!r}, "
        f"{run_id!r}, id={run_id!r})\n"
        "print('not killed')\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script],
        env=cli_env(db_url, ledger, fault="after_run_start"),
        cwd=ledger,
        capture_output=True,
        text=True,
        timeout=scaled(TIMEOUT),
        check=False,
    )
    assert killed.returncode == KILLED, described(killed)
    assert killed.stdout == ""
    history = CrashHistory(db_url, ledger, run_id)
    history.crashed()
    assert [row["kind"] for row in journal(db_url, run_id)] == ["task"]
    assert run_row(db_url, run_id)["lease_owner"] is not None  # the dead process's
    assert model_calls(ledger, run_id) == []

    resumed = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout == uncrashed["ledgered"] + "\n"
    _, asked = check_finished(db_url, run_id, uncrashed["ledgered"], ledger, history)
    assert set(asked.values()) == {1}  # no step asked twice
    assert run_row(db_url, run_id)["resumes"] == 1
    assert all(call.attempt == 1 for call in tool_calls(ledger, run_id))


# Each process dies at the next point of this list, the last one finishes: crashes while a
# crash is being settled (attempt 3), on every kind of tool, and around the final answer.
CHAIN = [
    "during_tool@1",  # run: deposit of step 1 applied, unrecorded
    "before_observation_commit@1",  # resume: deposit re-run with its key (attempt 2), unrecorded
    "after_observation_commit@2",  # attempt 3 recorded, square of step 2 recorded: dies
    "before_action_commit@1",  # step 3's action lost: the model will be asked again
    "during_tool@1",  # notify of step 3 sends, unrecorded: OutcomeUnknown from now on
    "after_action_commit@2",  # OutcomeUnknown recorded, deposit 4 done, square 5 pending
    "before_final_commit@1",  # square 5 re-run, notify 6 sent, the answer lost
    "after_final_commit@1",  # the answer recorded (asked again), then dies
    None,  # resume: the run is finished, its result is printed
]


def test_killed_again_and_again_while_resuming(
    db_url: str, ledger: Path, uncrashed: dict[str, str]
) -> None:
    run_id = "chain"
    history = CrashHistory(db_url, ledger, run_id)
    for i, fault in enumerate(CHAIN):
        first = ("run", agent_ref("ledgered"), run_id, "--id", run_id)
        args = first if i == 0 else ("resume", run_id)
        result = cli(*args, db_url=db_url, ledger=ledger, fault=fault)
        if fault is None:
            assert result.returncode == 0, described(result)
            assert result.stdout == uncrashed["ledgered"] + "\n"
            break
        assert result.returncode == KILLED, f"{fault}: {described(result)}"
        history.crashed()
        check_journal(journal(db_url, run_id), finished=fault == "after_final_commit@1")

    rows, asked = check_finished(db_url, run_id, uncrashed["ledgered"], ledger, history)
    assert {step for step, count in asked.items() if count > 1} == {3, 7}
    deposit_attempts = [c.attempt for c in tool_calls(ledger, run_id, "deposit") if c.step == 1]
    assert deposit_attempts == [1, 2, 3]
    assert tool_steps(rows, "deposit")[1]["attempt"] == 3
    notify = tool_steps(rows, "notify")
    assert notify[3]["is_error"] and notify[3]["content"].startswith("OutcomeUnknown")
    assert (notify[6]["is_error"], notify[6]["content"]) == (False, "sent")
    assert sorted(step for step, _ in notices(ledger, run_id)) == [3, 6]
    square_attempts = [c.attempt for c in tool_calls(ledger, run_id, "square") if c.step == 5]
    assert square_attempts == [2]  # it never ran before the crash: attempt 2 is its first run
    assert run_row(db_url, run_id)["resumes"] == 7


def _kill_at_random(proc: subprocess.Popen[str], delay: float | None) -> tuple[int, str]:
    """SIGKILL `proc` after `delay` seconds unless it ends first: its exit status, stdout."""
    try:
        proc.wait(timeout=delay if delay is not None else 60)
    except subprocess.TimeoutExpired:
        proc.kill()
    stdout, _ = proc.communicate(timeout=60)
    return proc.returncode, stdout


KILLS = 4  # then the next process is left to finish the run


@pytest.mark.parametrize("seed", [7])
def test_killed_at_random_moments(
    seed: int, db_url: str, ledger: Path, uncrashed: dict[str, str]
) -> None:
    """Kill a slow run at random moments, KILLS times, then let a process finish it.

    Even rounds (the first included) kill blind, anywhere from process start-up to the
    middle of the work. Odd rounds wait until this process has asked the model once, then
    kill at random: that guarantees progress every other round, so the run never ends in
    crash_loop (which counts takeovers in a row that made no progress).
    """
    rng = random.Random(seed)
    run_id = f"random-{seed}"
    env = cli_env(db_url, ledger, sleep=0.05)
    history = CrashHistory(db_url, ledger, run_id)
    kills = 0
    for round_ in range(2 * KILLS + 2):
        # Killed before it created the run, it is started again (the run's id is chosen).
        created = find_row(db_url, run_id) is not None
        args = ["resume", run_id] if created else ["run", agent_ref("long"), run_id, "--id", run_id]
        proc = start(*args, env=env, cwd=ledger)
        began = time.monotonic()
        delay: float | None = None
        if kills == KILLS:
            pass  # this one may finish
        elif round_ % 2 == 0:
            # A fresh process lives 1.5 s or more (start-up, 12 tool calls of 50 ms): with
            # this seed the first blind kill lands.
            delay = max(0.0, rng.uniform(0.4, 1.4) - (time.monotonic() - began))
        else:
            wait_for(
                lambda proc=proc: (
                    proc.poll() is not None
                    or any(call.pid == proc.pid for call in model_calls(ledger, run_id))
                ),
                what="the resumed process to ask the model",
            )
            delay = rng.uniform(0.0, 0.4)
        status, stdout = _kill_at_random(proc, delay)
        if status == 0:
            # Finished by itself (or it found the run finished by one killed on its way out).
            assert stdout == uncrashed["long"] + "\n"
            break
        assert status == KILLED, f"round {round_}: exit {status}"
        kills += 1
        history.crashed()
        check_journal(journal(db_url, run_id), finished=False)
    else:
        pytest.fail("the run never finished")
    assert kills >= 2, "the run finished too early to test anything: lengthen the agent"

    check_finished(db_url, run_id, uncrashed["long"], ledger, history)


# People in the loop: one run killed at every new fault point in turn, around its waits,
# its answers, and the approved calls. Each entry: the command, its fault, and the exit
# expected (KILLED, 4 for a run left waiting, 1 for a refused answer, 0).
GATED_CHAIN: list[tuple[tuple[str, ...], str | None, int]] = [
    (("run",), "before_wait_commit@1", KILLED),  # deposit's action and wait, not recorded
    (("resume",), "after_wait_commit@1", KILLED),  # the wait recorded: the run waits
    (("resume",), None, 4),  # still waiting: nothing to do, nothing claimed
    (("approve",), "after_answer_commit@1", KILLED),  # the approval recorded, then killed
    (("approve",), None, 1),  # a second answer is refused: it was approved already
    (("resume",), "before_approved_call@1", KILLED),  # killed just before the deposit
    (("resume",), "during_tool@1", KILLED),  # the deposit's effect done, unrecorded
    (("resume",), None, 4),  # deposit settled by its key; ask_human waits for a reply
    (("reply", "yes"), "after_answer_commit@1", KILLED),
    (("resume",), None, 4),  # square ran; notify waits for approval
    (("approve",), None, 0),
    (("resume",), "during_tool@1", KILLED),  # notify sent, unrecorded: OutcomeUnknown
    (("resume",), None, 0),  # the answer, as an uncrashed run gives it
]


def test_killed_at_every_point_of_a_run_that_waits_for_people(db_url: str, ledger: Path) -> None:
    run_id = "gated"
    history = CrashHistory(db_url, ledger, run_id)
    for i, (command, fault, expected) in enumerate(GATED_CHAIN):
        if command[0] == "run":
            args: tuple[str, ...] = ("run", agent_ref("gated"), run_id, "--id", run_id)
        else:
            args = (command[0], run_id, *command[1:])
        result = cli(*args, db_url=db_url, ledger=ledger, fault=fault)
        assert result.returncode == expected, f"{i} {args} {fault}: {described(result)}"
        if expected == KILLED:
            history.crashed()
        elif expected == 4:
            assert result.stdout == ""
            assert f"runner {'reply' if i == 7 else 'approve'} {run_id} --call" in result.stderr
        elif expected == 1:
            error = one_line_error(result.stderr)
            assert f"call {run_id}-1 was already approved by " in error, error
        check_journal(journal(db_url, run_id), finished=False)
    assert result.stdout == GATED_ANSWER + "\n"

    rows, asked = check_finished(db_url, run_id, GATED_ANSWER, ledger, history)
    # Step 1's action is written with its wait, in the park: the first kill, before it, left
    # nothing of the step, and the model was asked for it again. Every later crash came
    # after its step's action was recorded.
    assert asked[1] == 2 and set(asked.values()) == {1, 2} and list(asked.values()).count(2) == 1
    assert [r["kind"] for r in rows if r["step"] == 1] == [
        "action",
        "wait",
        "answer",
        "observation",
    ]
    deposits = [c.attempt for c in tool_calls(ledger, run_id, "deposit")]
    assert len(deposits) == 2 and deposits[0] < deposits[1]  # re-run with its key, effect once
    assert notices(ledger, run_id) == [(4, 1)]  # sent once, never re-run
    notify = tool_steps(rows, "notify")[4]
    assert notify["is_error"] and notify["content"].startswith("OutcomeUnknown")
    answers = [(r["step"], r["answer"], r["content"]) for r in rows if r["kind"] == "answer"]
    assert answers == [(1, "approved", None), (2, "replied", "yes"), (4, "approved", None)]
