"""Scorers killed mid-score with SIGKILL: each score is kept once, and a scorer runs at most
twice (once, and once more after a crash) whatever the crashes."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from runner.core.clock import utc_now
from runner.sql.database import open_engine
from runner.sql.schema import scores
from runner.sql.scores import due
from tests.conditions import wait_until

from .harness import KILLED, cli, described

AGENT = f"{Path(__file__).with_name('score_agents.py')}:scored"
LEASE = "0.5"


def score_rows(db_url: str) -> dict[str, tuple[str, float | None, int]]:
    engine = open_engine(db_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(scores)).all()
    finally:
        engine.dispose()
    return {row.run_id: (row.status, row.value, row.attempts) for row in rows}


def runs_of_scorer(ledger: Path) -> list[str]:
    log = ledger / "scored.log"
    return log.read_text().split() if log.exists() else []


def worker(db_url: str, ledger: Path, fault: str | None) -> int:
    done = cli("worker", "--once", "--lease", LEASE, db_url=db_url, ledger=ledger, fault=fault)
    assert "Traceback" not in done.stderr, described(done)
    return done.returncode


def wait_for_lapse(db_url: str, run_id: str) -> None:
    """Until the dead worker's claim on the run's score lapsed (another may take it)."""
    engine = open_engine(db_url)
    try:
        wait_until(
            lambda: any(d.run_id == run_id for d in due(engine, utc_now(), 10)),
            what=f"the claim on {run_id}'s score to lapse",
        )
    finally:
        engine.dispose()


def test_a_scorer_killed_mid_score_is_kept_once_and_run_at_most_twice(
    db_url: str, ledger: Path
) -> None:
    # Killed after the scorer ran, before its score was kept: the next worker runs it again
    # (attempt 2) and keeps it once.
    assert cli("submit", AGENT, "one", "--id", "s1", db_url=db_url, ledger=ledger).returncode == 0
    assert worker(db_url, ledger, "before_score_commit") == KILLED
    assert score_rows(db_url) == {"s1": ("scoring", None, 1)}
    wait_for_lapse(db_url, "s1")
    assert worker(db_url, ledger, None) == 0
    assert score_rows(db_url) == {"s1": ("scored", 0.7, 2)}
    assert runs_of_scorer(ledger) == ["s1", "s1"]

    # Killed twice: the third worker does not start it again, it fails it.
    assert cli("submit", AGENT, "two", "--id", "s2", db_url=db_url, ledger=ledger).returncode == 0
    assert worker(db_url, ledger, "before_score_commit") == KILLED
    wait_for_lapse(db_url, "s2")
    assert worker(db_url, ledger, "before_score_commit") == KILLED
    wait_for_lapse(db_url, "s2")
    assert worker(db_url, ledger, None) == 0
    assert score_rows(db_url) == {"s1": ("scored", 0.7, 2), "s2": ("failed", None, 2)}
    assert runs_of_scorer(ledger) == ["s1", "s1", "s2", "s2"]
