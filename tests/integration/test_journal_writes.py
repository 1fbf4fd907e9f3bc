"""A journal write that fails: on a lost connection it is tried again while the lease lasts
(a tool's result is not dropped), and a value the database refuses ends the run with the
reason recorded instead of leaving it to be taken over and refused again."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from runner import Agent, Runner, tool
from runner.core.counters import Counters
from runner.errors import EntryRefused
from runner.sql import leases
from runner.sql import runs as store
from runner.sql.journal import SqlJournal

from .support import Transcript, entry_rows, observations, task_entry, tool_action


def test_an_entry_the_database_refuses_stops_the_run_with_the_reason(db_url: str) -> None:
    with Runner(db_url) as runner:
        store.create_run(
            runner.engine,
            run_id="r",
            agent=None,
            agent_name=None,
            release=None,
            task="t",
            budgets={},
        )
        claim = leases.claim_run(runner.engine, "r", owner="w:1:1", lease_seconds=30, max_resumes=3)
        journal = SqlJournal(runner.engine, claim, lease_seconds=30)
        journal.append(task_entry("t"))
        # No column holds an attempt number past 2**63: SQLite's driver and PostgreSQL
        # both refuse it, and no retry would change that.
        action = tool_action("r", 1, "add", {"a": 1}, Counters(steps=1))
        with pytest.raises(EntryRefused, match="could not be journaled"):
            journal.append(replace(action, attempt=2**64))
        row = runner.row("r")
        rows = entry_rows(runner.engine, "r")
    assert (row.status, row.stop_reason) == ("finished", "model_error")
    assert row.error is not None and "step 1 could not be journaled" in row.error
    assert [r["kind"] for r in rows] == ["task"]


@pytest.mark.parametrize(
    "db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_tool_result_survives_a_dropped_connection(db_url: str) -> None:
    sent: list[int] = []

    @tool  # not idempotent: were its result dropped, a resume could only say OutcomeUnknown
    def transfer(amount: int) -> str:
        sent.append(amount)
        # Every other connection to this database is cut, the journal's own among them:
        # its next write (this call's result) finds its connection gone.
        admin = create_engine(db_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            cut = connection.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        admin.dispose()
        assert cut >= 1
        return f"sent {amount}"

    def model(transcript: Transcript) -> dict[str, Any]:
        seen = observations(transcript)
        if not seen:
            return {"type": "tool", "name": "transfer", "args": {"amount": 5}}
        return {"type": "final", "content": seen[-1]["content"]}

    with Runner(db_url) as runner:
        result = runner.run(Agent(model, {"transfer": transfer}), "pay", id="cut")
        rows = entry_rows(runner.engine, "cut")
    assert (result.stop_reason, result.output) == ("final", "sent 5")
    assert sent == [5]
    (observed,) = [r for r in rows if r["kind"] == "observation"]
    assert (observed["content"], observed["attempt"]) == ("sent 5", 1)
    assert {r["lease_epoch"] for r in rows} == {1}
