"""An Agents SDK agent whose `as_tool()` sub-agent is a child run, the `runner` process
SIGKILLed inside the child's tool (its effect done, not journaled), then `runner resume` of
the root, on SQLite and PostgreSQL. The agents are tests/acceptance/frameworks/sdk_agents.py's
`bank` and `teller`, over HTTP to a chat-completions server in this process that answers by
which agent asks and how far its conversation went; the deposit ledger is outside runner's
database. After the resume: the child started once, its deposit's effect once (attempt 2
with the same key), no model response requested again once journaled, and `runner show
--tree` draws the child under its root."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("agents")

from runner.core.tree import child_run_id
from tests.providers.fake_servers import FakeServer, Reply, Request, openai_completion

from .harness import KILLED, cli, cli_env, described, journal
from .test_pydantic_crash import FRAMEWORKS, calls, effects

AGENT = f"{FRAMEWORKS / 'sdk_agents.py'}:bank"
ANSWER = "The teller says: deposited, balance 50."


class TreeServer(FakeServer):
    """The bank calls the teller, then answers with what it said; the teller deposits,
    then answers with the balance."""

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
        messages = request.json["messages"]
        done = [m for m in messages if m["role"] == "tool"]
        if messages[0]["content"].startswith("Bank"):
            body = (
                openai_completion(f"The teller says: {done[0]['content']}.")
                if done
                else openai_completion(calls=[("call_t", "teller", '{"input": "Deposit 5."}')])
            )
        elif done:
            body = openai_completion(f"deposited, {done[0]['content']}")
        else:
            body = openai_completion(calls=[("call_d", "deposit", '{"amount": 5}')])
        return Reply(200, json.dumps(body).encode())

    def asked(self) -> Counter[tuple[str, int]]:
        """How often each (agent, step) response was requested."""
        return Counter(
            (
                r.json["messages"][0]["content"].split(":")[0],
                1 + sum(m["role"] == "tool" for m in r.json["messages"]),
            )
            for r in self.requests
        )


@pytest.fixture
def chat() -> Iterator[TreeServer]:
    server = TreeServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_kill_inside_a_childs_tool_resumes_the_tree_without_repeating_its_effect(
    db_url: str, ledger: Path, chat: TreeServer
) -> None:
    root = "bank-1"
    env = cli_env(db_url, ledger, fault="during_tool@1")
    env["RUNNER_TEST_OPENAI_URL"] = chat.url
    killed = cli("run", AGENT, "Deposit 5.", "--id", root, db_url=db_url, ledger=ledger, env=env)
    assert killed.returncode == KILLED, described(killed)

    env.pop("RUNNER_FAULT")
    resumed = cli("resume", root, db_url=db_url, ledger=ledger, env=env)
    assert resumed.returncode == 0, described(resumed)
    assert resumed.stdout.strip() == ANSWER

    child = child_run_id(root, f"{root}-1")
    key = f"{child}-1"
    assert calls(ledger, "deposit") == [(key, 1), (key, 2)]  # run again with its key
    assert effects(ledger) == [(key, 50)]  # one effect
    assert set(chat.asked().values()) == {1}, chat.asked()  # no response asked twice
    rows = journal(db_url, child)
    kinds = [(row["kind"], row["tool"]) for row in rows]
    assert kinds == [
        ("task", None),
        ("action", "deposit"),
        ("observation", "deposit"),
        ("final", None),
    ]
    assert rows[2]["attempt"] == 2
    shown = cli("show", root, "--tree", db_url=db_url, ledger=ledger, env=env)
    assert shown.returncode == 0, described(shown)
    assert child in shown.stdout and "teller" in shown.stdout
