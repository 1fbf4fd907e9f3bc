"""Fixtures of the acceptance tests: a ledger folder per test, uncrashed answers, and a
cluster of `runner worker` processes on one database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .agents import ANSWERS
from .harness import agent_ref, check_finished, cli, described
from .test_workers import Cluster


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """This test's folder for the agents' ledgers (also the subprocesses' working folder)."""
    folder = tmp_path / "ledger"
    folder.mkdir()
    return folder


@pytest.fixture(scope="session")
def uncrashed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The final answer of each test agent when nothing crashes, from real `runner run`s."""
    folder = tmp_path_factory.mktemp("uncrashed")
    db_url = f"sqlite:///{folder / 'runner.db'}"
    answers = {}
    for name in ("ledgered", "long", "parallel"):
        run_id = f"uncrashed-{name}"
        result = cli("run", agent_ref(name), run_id, "--id", run_id, db_url=db_url, ledger=folder)
        assert result.returncode == 0, described(result)
        answers[name] = result.stdout.strip()
        # Nothing crashed: every step was asked for once, every tool ran once.
        _rows, asked = check_finished(db_url, run_id, answers[name], folder)
        assert set(asked.values()) == {1}
    assert answers == ANSWERS
    return answers


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """Worker processes started on `db_url` by the test, all stopped at its end."""
    workers = Cluster(db_url, tmp_path)
    try:
        yield workers
    finally:
        workers.close()
