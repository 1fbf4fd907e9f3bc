"""A Pydantic AI agent on pydantic-ai's Anthropic model class, thinking enabled, under
`RunnerAgent` (tests/acceptance/frameworks/pydantic_anthropic_agents.py), on PostgreSQL:
run to its end, and run again with the `runner` process SIGKILLed right after its first
response (a signed thinking block and a tool call) was journaled, then resumed and
replayed.

The Messages server in this process answers by how many tool results the conversation holds
and records every request. After the resume: no response was requested again, and each
request the resumed run sent is, byte for byte, the uninterrupted run's: the thinking blocks
and their signatures went back to the provider as they came (the journal kept them whole).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("anthropic")

from tests.providers.fake_servers import (
    FakeServer,
    Reply,
    Request,
    anthropic_message,
    text_block,
    tool_use,
)

from .harness import KILLED, check_journal, cli, cli_env, described, journal

AGENTS = Path(__file__).with_name("frameworks") / "pydantic_anthropic_agents.py"
TASK = "Deposit 5, then notify."
ANSWER = "Done: balance 50."


def thought(n: int) -> dict[str, Any]:
    """A thinking block as Anthropic signs it: the signature must come back unchanged."""
    return {"type": "thinking", "thinking": f"Step {n}: the next tool.", "signature": f"sig-{n}=="}


class MessagesServer(FakeServer):
    """Answers each message by how many tool results the conversation holds: deposit, then
    notify, then the answer; each tool call after a signed thinking block."""

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
        done = results(request.json)
        if not done:
            body = anthropic_message(thought(1), tool_use("toolu_d", "deposit", {"amount": 5}))
        elif len(done) == 1:
            body = anthropic_message(thought(2), tool_use("toolu_n", "notify", {"text": "ok"}))
        else:
            body = anthropic_message(text_block(f"Done: {done[0]}."))
        return Reply(200, json.dumps(body).encode())


def results(body: dict[str, Any]) -> list[str]:
    """The tool results a request's conversation holds, in order."""
    found = []
    for message in body["messages"]:
        content = message["content"] if isinstance(message["content"], list) else []
        for block in content:
            if block.get("type") == "tool_result":
                inner = block["content"]
                found.append(inner if isinstance(inner, str) else inner[0]["text"])
    return found


@pytest.fixture
def messages() -> Iterator[MessagesServer]:
    server = MessagesServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def runner(*args: str, db_url: str, ledger: Path, url: str, fault: str | None = None) -> Any:
    env = cli_env(db_url, ledger, fault=fault)
    env["RUNNER_TEST_ANTHROPIC_URL"] = url
    return cli(*args, db_url=db_url, ledger=ledger, env=env)


# One database: what is under test is the model class's parts kept whole through the journal,
# which both stores write alike (the kill matrix of test_pydantic_crash.py runs each fault
# point on both); each of the four `runner` processes imports pydantic-ai and anthropic.
@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_an_anthropic_thinking_run_killed_after_its_response_resumes_with_the_same_history(
    db_url: str, tmp_path: Path, messages: MessagesServer
) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    ref = f"{AGENTS}:thinker"
    clean = runner(
        "run", ref, TASK, "--id", "clean", db_url=db_url, ledger=ledger, url=messages.url
    )
    assert (clean.returncode, clean.stdout) == (0, ANSWER + "\n"), described(clean)
    uninterrupted = [request.body for request in messages.requests]
    assert len(uninterrupted) == 3
    # The first response's signed thinking went back with the history.
    assert thought(1) in json.loads(uninterrupted[1])["messages"][1]["content"]
    messages.requests.clear()

    killed = runner(
        "run", ref, TASK, "--id", "crashed",
        db_url=db_url, ledger=ledger, url=messages.url, fault="after_action_commit@1",
    )  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    check_journal(journal(db_url, "crashed"), finished=False)
    resumed = runner("resume", "crashed", db_url=db_url, ledger=ledger, url=messages.url)
    assert (resumed.returncode, resumed.stdout) == (0, ANSWER + "\n"), described(resumed)

    # Each response requested once (the first before the kill, never again), and every
    # request byte for byte the uninterrupted run's.
    assert [request.body for request in messages.requests] == uninterrupted
    rows = journal(db_url, "crashed")
    check_journal(rows)
    assert [row["kind"] for row in rows if row["step"] == 1][:2] == ["response", "action"]

    replayed = runner("replay", "crashed", db_url=db_url, ledger=ledger, url=messages.url)
    assert replayed.returncode == 0, described(replayed)
    assert len(messages.requests) == 3  # a replay asks no model
