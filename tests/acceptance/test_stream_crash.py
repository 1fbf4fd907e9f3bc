"""Acceptance: a `runner run` process SIGKILLed while its model's answer streams in.

The fake provider stops its stream halfway; the test waits until the pieces sent so far are
in the `deltas` table (a follower in another process could read them), kills the run, and
then: the journal holds no half response (only the task), `runner resume` calls the model
again and streams the whole answer, the journal records it once, and no delta is left.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runner import Runner
from tests.conditions import GENEROUS
from tests.providers.fake_servers import serving
from tests.providers.test_streaming import ANTHROPIC_BODIES, MAKERS, OPENAI_BODIES

from .harness import KILLED, cli, cli_env, described, journal, start, wait_for
from .stream_agents import URL_VARIABLE

AGENTS = Path(__file__).with_name("stream_agents.py")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_run_killed_mid_stream_journals_no_half_answer_and_streams_again(
    db_url: str, ledger: Path, provider: str
) -> None:
    _, events = MAKERS[provider]
    body = OPENAI_BODIES["text"] if provider == "openai" else ANTHROPIC_BODIES["text"]
    answer = (
        body["choices"][0]["message"]["content"]
        if provider == "openai"
        else body["content"][0]["text"]
    )
    hold = threading.Event()
    with serving() as server:
        server.stream(events(body, size=4), hold=hold, hold_after=6)  # stops halfway
        server.stream(events(body, size=4))  # the resumed call's
        env = cli_env(db_url, ledger) | {URL_VARIABLE: server.url}
        worker = start("run", f"{AGENTS}:{provider}", "35?", "--id", "s", env=env, cwd=ledger)
        try:
            with Runner(db_url) as runner:
                wait_for(
                    lambda: len(runner.store.deltas_after("s", 0, 100)) >= 3,
                    what="the pieces sent so far in the deltas table",
                )
                worker.kill()
                worker.communicate(timeout=GENEROUS)
                assert worker.returncode == KILLED
                assert [row["kind"] for row in journal(db_url, "s")] == ["task"]
                left = runner.store.deltas_after("s", 0, 100)
                assert answer.startswith("".join(d.text for _, d in left))  # a crash's leftovers
        finally:
            if worker.returncode is None:
                worker.kill()
                worker.communicate(timeout=GENEROUS)
            hold.set()  # the server's thread ends its first stream
        resumed = cli("resume", "s", db_url=db_url, ledger=ledger, env=env)
        assert resumed.returncode == 0, described(resumed)
        assert resumed.stdout.strip() == answer
        rows = journal(db_url, "s")
        assert [row["kind"] for row in rows] == ["task", "final"]
        assert rows[-1]["content"] == answer
        assert [request.json["stream"] for request in server.requests] == [True, True]
    with Runner(db_url) as runner:
        assert runner.store.deltas_after("s", 0, 100) == []  # deleted once journaled
