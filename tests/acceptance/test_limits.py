"""Acceptance: provider limits with real `runner` processes, on SQLite and PostgreSQL. A
worker SIGKILLed between a model call's reservation and its settle holds no slot past its
lease, yet its call keeps counting for its minute (the provider may have charged it):
another worker (under a concurrency of 1, which a leaked call would hold for ever) finishes
the run, its call charged beside the dead one's. The commands print one line per error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from runner.sql.schema import limit_reservations
from tests.conditions import wait_until

from .harness import cli, described, one_line_error

AGENT = f"{Path(__file__).resolve().with_name('limit_agents.py')}:agent"


def limits(db_url: str, ledger: Path) -> dict[str, Any]:
    listed = cli("limit", "list", "--json", db_url=db_url, ledger=ledger)
    assert listed.returncode == 0, described(listed)
    return {info["name"]: info for info in json.loads(listed.stdout)}


def test_a_worker_killed_between_reserve_and_settle_holds_no_slot_past_its_lease(
    db_url: str, ledger: Path
) -> None:
    said = cli(
        "limit", "set", "m", "--tokens-per-minute", "100000", "--concurrency", "1",
        db_url=db_url, ledger=ledger,
    )  # fmt: skip
    assert said.returncode == 0 and said.stdout.startswith("limit m: at most"), described(said)
    submitted = cli("submit", AGENT, "go", "--id", "limited", db_url=db_url, ledger=ledger)
    assert submitted.returncode == 0, described(submitted)
    killed = cli(
        "worker", "--once", "--lease", "3",
        db_url=db_url, ledger=ledger, fault="after_limit_reserve",
    )  # fmt: skip
    assert killed.returncode == -9, described(killed)
    # The reservation was committed and never settled: the dead worker's call.
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            rows = list(connection.execute(select(limit_reservations)))
    finally:
        engine.dispose()
    assert [(row.run_id, row.settled) for row in rows] == [("limited", False)]
    estimate = rows[0].tokens
    # Once the lease is over it is in flight no more, but still charged to its minute.
    wait_until(
        lambda: limits(db_url, ledger)["m"]["in_flight"] == 0,
        what="the dead worker's reservation to leave the calls in flight with its lease",
    )
    info = limits(db_url, ledger)["m"]
    assert (info["tokens"], info["requests"]) == (estimate, 1)
    # Another worker takes the run over and makes its call under the concurrency of 1.
    resumed = cli("worker", "--once", "--lease", "3", db_url=db_url, ledger=ledger)
    assert resumed.returncode == 0, described(resumed)
    shown = cli("show", "limited", "--json", db_url=db_url, ledger=ledger)
    assert json.loads(shown.stdout)["stop_reason"] == "final", described(shown)
    info = limits(db_url, ledger)["m"]
    assert (info["tokens"], info["requests"], info["in_flight"]) == (estimate + 50, 2, 0)


def test_limit_commands_and_their_errors(db_url: str, ledger: Path) -> None:
    none = cli("limit", "list", db_url=db_url, ledger=ledger)
    assert none.returncode == 0 and none.stdout.strip() == "no limits", described(none)
    cli(
        "limit", "set", "openai/gpt-4.1", "--tokens-per-minute", "60000",
        "--requests-per-minute", "300", db_url=db_url, ledger=ledger,
    )  # fmt: skip
    table = cli("limit", "list", db_url=db_url, ledger=ledger)
    assert "openai/gpt-4.1" in table.stdout and "0/60,000" in table.stdout, described(table)
    missing = cli("limit", "rm", "nothing", db_url=db_url, ledger=ledger)
    assert missing.returncode == 1 and one_line_error(missing.stderr) == (
        "Error: no limit named nothing"
    )
    bare = cli("limit", "set", "x", db_url=db_url, ledger=ledger)
    assert bare.returncode == 2 and "give --tokens-per-minute" in one_line_error(bare.stderr)
    bad = cli("limit", "set", "a b", "--concurrency", "1", db_url=db_url, ledger=ledger)
    assert bad.returncode == 2 and "limit 'a b' must be" in one_line_error(bad.stderr)
    gone = cli("limit", "rm", "openai/gpt-4.1", db_url=db_url, ledger=ledger)
    assert gone.returncode == 0 and gone.stdout.strip() == "limit openai/gpt-4.1 removed"
