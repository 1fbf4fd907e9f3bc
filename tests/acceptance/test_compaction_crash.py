"""Acceptance: a compacting run SIGKILLed during its summary's model call and after the
summary is journaled, on SQLite and PostgreSQL. Once journaled, the summary is never asked
for again (counted at the fake provider): a resume, a fork and a replay reuse it, and its
tokens are the run's."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runner import Runner

from .compaction_agents import PAGES, URL_VARIABLE, ReaderProvider, reader, serving
from .harness import KILLED, cli, cli_env, described, journal, run_row, start, wait_for

AGENT = f"{Path(__file__).with_name('compaction_agents.py')}:reader"


def test_a_journaled_summary_is_never_asked_for_again(
    db_url: str, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = ReaderProvider()
    with serving(provider) as url:
        env = cli_env(db_url, ledger) | {URL_VARIABLE: url}
        killed = cli("run", AGENT, "read", "--id", "c", db_url=db_url, ledger=ledger,
                     env=env | {"RUNNER_FAULT": "after_compaction_commit@1"})  # fmt: skip
        assert killed.returncode == KILLED, described(killed)
        assert len(provider.summaries) == 1
        rows = journal(db_url, "c")
        assert rows[-1]["kind"] == "compaction"
        summary = rows[-1]["content"]

        resumed = cli("resume", "c", db_url=db_url, ledger=ledger, env=env)
        assert resumed.returncode == 0, described(resumed)
        assert resumed.stdout.strip() == "read them all"
        # The resumed step's model call was shown the journaled summary.
        first_after = provider.asked[-(PAGES + 2 - rows[-1]["step"])]
        assert any(summary in str(m.get("content")) for m in first_after)
        rows = journal(db_url, "c")
        summaries = [row for row in rows if row["kind"] == "compaction"]
        assert summaries[0]["content"] == summary
        assert len(provider.summaries) == len(summaries)
        # Its tokens are the run's: the last entry's counters hold every call's.
        spent = sum(row["usage_tokens"] for row in rows)
        assert summaries[0]["usage_tokens"] > 0 and run_row(db_url, "c")["tokens"] == spent

        shown = cli("show", "c", db_url=db_url, ledger=ledger, env=env)
        assert "== compacted: the first" in shown.stdout, described(shown)

        # A fork from the step before the first summary copies it, and a replay reads it.
        monkeypatch.setenv(URL_VARIABLE, url)
        asked = len(provider.summaries)
        with Runner(db_url) as runner:
            fork = runner.fork("c", summaries[0]["step"] - 1, agent=reader())
            assert runner.resume(fork, agent=reader()).output == "read them all"
            assert runner.replay("c", agent=reader()).agrees
        fork_summaries = [row for row in journal(db_url, fork) if row["kind"] == "compaction"]
        assert fork_summaries[0]["content"] == summary
        assert len(provider.summaries) - asked == len(fork_summaries) - 1


def test_a_run_killed_during_its_summary_call_asks_again(db_url: str, ledger: Path) -> None:
    hold = threading.Event()
    provider = ReaderProvider(hold)
    with serving(provider) as url:
        env = cli_env(db_url, ledger) | {URL_VARIABLE: url}
        worker = start("run", AGENT, "read", "--id", "d", env=env, cwd=ledger)
        try:
            wait_for(lambda: len(provider.summaries) == 1, what="the summary's request")
            worker.kill()
            worker.communicate()
            assert worker.returncode == KILLED
        finally:
            if worker.returncode is None:
                worker.kill()
                worker.communicate()
        assert "compaction" not in [row["kind"] for row in journal(db_url, "d")]
        provider.hold = None
        hold.set()
        resumed = cli("resume", "d", db_url=db_url, ledger=ledger, env=env)
        assert resumed.returncode == 0, described(resumed)
        summaries = [row for row in journal(db_url, "d") if row["kind"] == "compaction"]
        # Nothing was journaled: asked again, once, then journaled once.
        assert provider.summaries[0] == provider.summaries[1]
        assert len(provider.summaries) == len(summaries) + 1
