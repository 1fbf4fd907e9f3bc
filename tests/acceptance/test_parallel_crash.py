"""The `runner` command SIGKILLed in the middle of a step of several tool calls, then resumed.

The parallel agent's first step asks for four calls at once: quick (plain, it finishes),
square (idempotent), deposit (takes the idempotency key) and notify (plain, neither).
RUNNER_TEST_HOLD keeps deposit and notify in flight, their effects done, while quick and
square finish; the fault point then kills the process. After the resume: no finished call
ran again, the unfinished ones were settled by their declarations (deposit again with its
key, its effect still single; notify not at all, the model told its outcome is unknown),
the model was never asked again for the recorded step, and the answer is an uncrashed run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.providers.fake_servers import FakeServer, openai_completion, serving

from .agents import HOLD_VARIABLE, OPENAI_URL_VARIABLE
from .harness import (
    KILLED,
    CrashHistory,
    agent_ref,
    check_finished,
    check_journal,
    cli,
    cli_env,
    described,
    effects,
    journal,
    notices,
    tool_calls,
    tool_steps,
)

TOOLS = ("quick", "square", "deposit", "notify")


@dataclass(frozen=True)
class Case:
    fault: str
    hold: str | None  # RUNNER_TEST_HOLD of the killed process: how many calls stay in flight
    outcomes_before: tuple[str, ...]  # the tools whose outcome the killed process committed
    ran: dict[str, tuple[int, ...]]  # the attempts each tool really made, over both processes
    unknown: frozenset[str] = field(default_factory=frozenset)  # observed as OutcomeUnknown
    asked_twice: bool = False  # the batch was lost with the process: step 1 asked again


CASES = [
    # Two calls finished and committed, two in flight with their effects done.
    Case(
        "after_observation_commit@2",
        "2",
        ("quick", "square"),
        {"quick": (1,), "square": (1,), "deposit": (1, 2), "notify": (1,)},
        frozenset({"notify"}),
    ),
    # The batch committed, no call started: each pending call is settled by its tool.
    Case(
        "after_action_commit@1",
        None,
        (),
        {"quick": (), "square": (2,), "deposit": (2,), "notify": ()},
        frozenset({"quick", "notify"}),
    ),
    # Killed before the batch's one commit: nothing is journaled, the model is asked again.
    Case(
        "before_action_commit@1",
        None,
        (),
        {"quick": (1,), "square": (1,), "deposit": (1,), "notify": (1,)},
        asked_twice=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.fault for case in CASES])
def test_killed_in_the_middle_of_a_batch_then_resumed(
    case: Case, db_url: str, ledger: Path, uncrashed: dict[str, str]
) -> None:
    run_id = f"batch-{CASES.index(case)}"
    env = cli_env(db_url, ledger, fault=case.fault)
    if case.hold is not None:
        env[HOLD_VARIABLE] = case.hold
    killed = cli("run", agent_ref("parallel"), run_id, "--id", run_id, db_url=db_url,
                 ledger=ledger, env=env)  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    history = CrashHistory(db_url, ledger, run_id)
    history.crashed()

    before = journal(db_url, run_id)
    check_journal(before, finished=False)
    actions = [row["tool"] for row in before if row["kind"] == "action"]
    assert actions == ([] if case.asked_twice else list(TOOLS))
    done_before = {row["tool"]: row for row in before if row["kind"] == "observation"}
    assert sorted(done_before) == sorted(case.outcomes_before)

    resumed = cli("resume", run_id, db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout == uncrashed["parallel"] + "\n"

    rows, asked = check_finished(db_url, run_id, uncrashed["parallel"], ledger, history)
    assert asked[1] == (2 if case.asked_twice else 1)
    ran = {name: tuple(call.attempt for call in tool_calls(ledger, run_id, name)) for name in TOOLS}
    assert ran == case.ran
    # What the killed process committed stands: the same row, written under its lease.
    for row in done_before.values():
        after = next(r for r in rows if r["seq"] == row["seq"])
        assert after == row
    for name in TOOLS:
        (observation,) = tool_steps(rows, name).values()
        if name in case.unknown:
            assert observation["content"].startswith(f"OutcomeUnknown: {name} was interrupted")
            assert observation["attempt"] == 2
        else:
            assert not observation["is_error"], observation["content"]
    # Each effect happened once: one deposit under its key, at most one notice.
    assert [key for key, *_ in effects(ledger, run_id)] == [f"{run_id}-1.3"]
    assert len(notices(ledger, run_id)) == len(case.ran["notify"])
    # The model saw the calls' outcomes in call order, each with its call's provider id.
    ids = [row["call_id"] for row in rows if row["kind"] == "action"]
    assert ids == ["call_q", "call_s", "call_d", "call_n"]


def openai_script(server: FakeServer) -> None:
    calls = [
        ("call_q", "quick", '{"x": 1}'),
        ("call_s", "square", '{"x": "3"}'),
        ("call_d", "deposit", '{"amount": 5}'),
    ]
    server.reply(openai_completion("Three at once.", calls=calls))
    server.reply(openai_completion("9 and 5"))


def openai_env(db_url: str, ledger: Path, server: FakeServer, **more: str) -> dict[str, str]:
    env = cli_env(db_url, ledger)
    env[OPENAI_URL_VARIABLE] = f"{server.url}/v1"
    env.update(more)
    return env


def test_a_batch_killed_mid_flight_resumes_with_the_requests_of_an_uncrashed_run(
    db_url: str, ledger: Path
) -> None:
    task = "What are 3 squared and a deposit of 5?"
    with serving() as clean:
        openai_script(clean)
        done = cli("run", agent_ref("openai_parallel"), task, "--id", "clean", db_url=db_url,
                   ledger=ledger, env=openai_env(db_url, ledger, clean))  # fmt: skip
        assert done.returncode == 0, described(done)
        assert done.stdout == "9 and 5\n"
    with serving() as crashed:
        openai_script(crashed)
        killed = cli(
            "run", agent_ref("openai_parallel"), task, "--id", "crashed", db_url=db_url,
            ledger=ledger,
            env=openai_env(db_url, ledger, crashed, RUNNER_FAULT="after_observation_commit@2",
                           **{HOLD_VARIABLE: "1"}),
        )  # fmt: skip
        assert killed.returncode == KILLED, described(killed)
        assert len(crashed.requests) == 1
        outcomes = [
            row["tool"] for row in journal(db_url, "crashed") if row["kind"] == "observation"
        ]
        assert sorted(outcomes) == ["quick", "square"]  # deposit was in flight

        resumed = cli("resume", "crashed", db_url=db_url, ledger=ledger,
                      env=openai_env(db_url, ledger, crashed))  # fmt: skip
        assert resumed.returncode == 0, described(resumed)
        assert resumed.stdout == "9 and 5\n"
    # The server was asked once per step, and the resumed run's request is byte for byte
    # the uncrashed run's: the same provider ids, results in call order.
    assert [r.body for r in crashed.requests] == [r.body for r in clean.requests]
    last = crashed.bodies[1]["messages"]
    assert [m.get("tool_call_id") for m in last[-3:]] == ["call_q", "call_s", "call_d"]
    assert [m["content"] for m in last[-3:]] == ["quick 1", "9", "5"]
    attempts = {
        name: [call.attempt for call in tool_calls(ledger, "crashed", name)]
        for name in ("quick", "square", "deposit")
    }
    assert attempts == {"quick": [1], "square": [1], "deposit": [1, 2]}
    assert [key for key, *_ in effects(ledger, "crashed")] == ["crashed-1.3"]
    check_journal(journal(db_url, "crashed"))
