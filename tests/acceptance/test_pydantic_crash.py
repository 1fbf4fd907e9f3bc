"""A Pydantic AI agent and an OpenAI Agents SDK agent under their `RunnerAgent`s, the `runner`
process SIGKILLed at each fault point of a framework run, then resumed, on SQLite and
PostgreSQL.

The agents (tests/acceptance/frameworks/) talk through their frameworks' own OpenAI model
classes over HTTP to a chat-completions server in this process, which answers by where the
conversation stands (how many tool results it holds), so a request asked twice gets the same
reply. The server's log says which model responses were requested; the agents' ledgers,
outside runner's database, say which tool effects happened. After every crash and resume: no
model response requested again once it was journaled, deposit's effect once per key, notify
never run twice for one key, and the answer an uncrashed run gives.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from tests.providers.fake_servers import FakeServer, Reply, Request, openai_completion

from .harness import KILLED, check_journal, cli, cli_env, described, journal
from .test_workers import Cluster, wait_for

# In a folder of their own: the SDK's package is `agents`, which agents.py here would shadow.
FRAMEWORKS = Path(__file__).with_name("frameworks")
FILES = {"pydantic": FRAMEWORKS / "pydantic_agents.py", "sdk": FRAMEWORKS / "sdk_agents.py"}


@pytest.fixture(params=sorted(FILES))
def agents(request: pytest.FixtureRequest) -> Path:
    """The file of the agents under test: one framework's."""
    return FILES[str(request.param)]


ANSWER = "Done: balance 50."


class ChatServer(FakeServer):
    """Answers each chat completion by how many tool results the conversation holds:
    deposit, then notify, then the answer."""

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
        messages = request.json["messages"]
        done = [m for m in messages if m["role"] == "tool"]
        if not done:
            body = openai_completion(calls=[("call_d", "deposit", '{"amount": 5}')])
        elif len(done) == 1:
            body = openai_completion(calls=[("call_n", "notify", '{"text": "deposited"}')])
        else:
            body = openai_completion(f"Done: {done[0]['content']}.")
        return Reply(200, json.dumps(body).encode())

    def asked(self) -> Counter[int]:
        """How many times each step's response was requested (step = tool results + 1)."""
        return Counter(
            1 + sum(m["role"] == "tool" for m in r.json["messages"]) for r in self.requests
        )


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    folder = tmp_path / "ledger"
    folder.mkdir()
    return folder


def runner(
    *args: str, db_url: str, ledger: Path, chat: ChatServer, fault: str | None = None
) -> object:
    env = cli_env(db_url, ledger, fault=fault)
    env["RUNNER_TEST_OPENAI_URL"] = chat.url
    return cli(*args, db_url=db_url, ledger=ledger, env=env)


def calls(ledger: Path, tool: str) -> list[tuple[str, int]]:
    path = ledger / "calls.log"
    lines = path.read_text().split("\n") if path.exists() else []
    return [
        (key, int(attempt))
        for line in lines
        if line and (parts := line.split())[0] == tool
        for key, attempt in [(parts[1], parts[2])]
    ]


def effects(ledger: Path) -> list[tuple[str, int]]:
    if not (ledger / "effects.db").exists():
        return []
    with sqlite3.connect(ledger / "effects.db") as db:
        return [(key, balance) for key, balance in db.execute("SELECT key, balance FROM effects")]


@dataclass(frozen=True)
class Case:
    fault: str
    asked_twice: int | None = None  # the step whose response was lost with the process
    deposits: tuple[int, ...] = (1,)  # the attempts of deposit that really ran
    notices: tuple[int, ...] = (1,)  # the attempts of notify that really ran
    outcome_unknown: bool = False  # the model is shown notify's outcome is unknown


CASES = [
    # During the model request: its response was never journaled, so it is asked again.
    Case("before_action_commit@1", asked_twice=1),
    # After the response is journaled, before the tool ran: deposit (idempotent) runs as
    # attempt 2; notify (plain) is not run, and the model is told its outcome is unknown.
    Case("after_action_commit@1", deposits=(2,)),
    Case("after_action_commit@2", notices=(), outcome_unknown=True),
    # Inside the tool, its effect done: deposit runs again with the same key (one effect),
    # notify never again.
    Case("during_tool@1", deposits=(1, 2)),
    Case("during_tool@2", outcome_unknown=True),
    # After its result is journaled: nothing is redone.
    Case("after_observation_commit@1"),
    Case("after_observation_commit@2"),
]


def _pairs() -> list[object]:
    """Each fault point with each framework and on each database, in pairs: a fault point
    runs one framework on SQLite and the other on PostgreSQL, the next the other way round.
    The journal's code under the two frameworks is one (runner.core.foreign), and each
    `runner` process here imports a framework for about 1.5 s of CPU: the whole matrix cost
    twice the time for no path of its own."""
    pairs: list[object] = []
    for n, case in enumerate(CASES):
        frameworks = ("pydantic", "sdk") if n % 2 == 0 else ("sdk", "pydantic")
        for framework, database in zip(frameworks, ("sqlite", "postgres"), strict=True):
            marks = [pytest.mark.postgres] if database == "postgres" else []
            pairs.append(
                pytest.param(
                    case,
                    framework,
                    database,
                    marks=marks,
                    id=f"{database}-{framework}-{case.fault}",
                )
            )
    return pairs


@pytest.mark.parametrize(("case", "agents", "db_url"), _pairs(), indirect=["agents", "db_url"])
def test_a_pydantic_run_killed_at_a_fault_point_resumes_without_repeating_anything(
    case: Case, db_url: str, ledger: Path, chat: ChatServer, agents: Path
) -> None:
    run_id = "pyd-crash"
    ref = f"{agents}:ledgered"
    killed = runner(
        "run", ref, "Deposit 5, then notify.", "--id", run_id,
        db_url=db_url, ledger=ledger, chat=chat, fault=case.fault,
    )  # fmt: skip
    assert getattr(killed, "returncode", None) == KILLED, described(killed)
    check_journal(journal(db_url, run_id), finished=False)

    resumed = runner("resume", run_id, db_url=db_url, ledger=ledger, chat=chat)
    assert getattr(resumed, "returncode", None) == 0, described(resumed)
    assert getattr(resumed, "stdout", "") == ANSWER + "\n"

    rows = journal(db_url, run_id)
    check_journal(rows)
    asked = chat.asked()
    twice = {step for step, count in asked.items() if count > 1}
    assert twice == ({case.asked_twice} if case.asked_twice else set()), asked
    assert sorted(asked) == [1, 2, 3]

    deposit_key, notify_key = f"{run_id}-1", f"{run_id}-2"
    assert [attempt for key, attempt in calls(ledger, "deposit")] == list(case.deposits)
    assert {key for key, _ in calls(ledger, "deposit")} == {deposit_key}
    assert effects(ledger) == [(deposit_key, 50)]  # one effect, whatever ran twice
    assert [attempt for key, attempt in calls(ledger, "notify")] == list(case.notices)
    assert {key for key, _ in calls(ledger, "notify")} <= {notify_key}
    notified = [row for row in rows if row["kind"] == "observation" and row["tool"] == "notify"]
    assert len(notified) == 1
    if case.outcome_unknown:
        assert notified[0]["is_error"]
        assert notified[0]["content"].startswith("OutcomeUnknown: notify was interrupted")
        shown = chat.requests[-1].json["messages"][-1]
        assert shown["role"] == "tool" and "OutcomeUnknown" in shown["content"]


def test_a_pydantic_run_parked_for_an_approval_loses_nothing_to_a_kill(
    db_url: str, ledger: Path, chat: ChatServer, agents: Path
) -> None:
    run_id = "pyd-gated"
    ref = f"{agents}:gated"
    # Killed just after the wait was committed: the run waits, holding no worker.
    killed = runner(
        "run", ref, "Deposit 5, then notify.", "--id", run_id,
        db_url=db_url, ledger=ledger, chat=chat, fault="after_wait_commit",
    )  # fmt: skip
    assert getattr(killed, "returncode", None) == KILLED, described(killed)
    shown = runner("show", run_id, db_url=db_url, ledger=ledger, chat=chat)
    assert "waiting" in getattr(shown, "stdout", ""), described(shown)
    assert calls(ledger, "notify") == []

    approved = runner("approve", run_id, db_url=db_url, ledger=ledger, chat=chat)
    assert getattr(approved, "returncode", None) == 0, described(approved)
    resumed = runner("resume", run_id, db_url=db_url, ledger=ledger, chat=chat)
    assert getattr(resumed, "returncode", None) == 0, described(resumed)
    assert getattr(resumed, "stdout", "") == ANSWER + "\n"

    assert calls(ledger, "notify") == [(f"{run_id}-2", 1)]
    assert effects(ledger) == [(f"{run_id}-1", 50)]
    assert set(chat.asked().values()) == {1}  # no response requested twice
    rows = journal(db_url, run_id)
    check_journal(rows)
    assert [row["kind"] for row in rows if row["step"] == 2] == [
        "action",
        "wait",
        "answer",
        "observation",
    ]


def test_a_worker_killed_inside_a_tool_leaves_the_run_to_another_that_finishes_it(
    cluster: Cluster, chat: ChatServer, agents: Path
) -> None:
    """`runner worker` SIGKILLed inside deposit (its effect done, not journaled); a second
    worker takes the run over from the journal and finishes it."""
    served = {"RUNNER_TEST_OPENAI_URL": chat.url}
    victim = cluster.start(env={**served, "RUNNER_FAULT": "during_tool@1"})
    run_id = cluster.runner.submit(f"{agents}:ledgered", "Deposit 5, then notify.", id="wk-1")
    wait_for(lambda: not victim.alive() or None, 60, victim.log)
    assert victim.proc.returncode == KILLED, victim.log()

    cluster.start(env=served)
    rows = cluster.wait_finished([run_id])
    assert (rows[run_id].stop_reason, rows[run_id].output) == ("final", ANSWER)
    assert rows[run_id].resumes == 1
    assert [attempt for _, attempt in calls(cluster.ledger, "deposit")] == [1, 2]
    assert effects(cluster.ledger) == [(f"{run_id}-1", 50)]  # deposited once
    assert calls(cluster.ledger, "notify") == [(f"{run_id}-2", 1)]
    assert set(chat.asked().values()) == {1}  # no response requested twice
    check_journal(journal(cluster.url, run_id))
