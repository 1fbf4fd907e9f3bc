"""A database holding a run in every state `runner list` shows, for the tests that read it
two ways (plain SQL without SQLAlchemy, and the library's path) and compare.

Its times lie two days and a half hour back (a delayed run starts three days on), so that
the table's relative times (`2d00h ago`) read the same in two listings a moment apart.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update

from runner import Agent, Runner, tool
from runner.sql.schema import entries, runs
from runner.store.owner import this_process

from .agents import solver_agent
from .support import DEAD_OWNER

# Newest first, as `runner list` shows them.
IDS = [
    "waiting", "live", "stalled-dead", "stalled-expired", "delayed", "queued", "forked",
    "done-json", "done-text",
]  # fmt: skip


@tool(approval=lambda args: True)
def refund(amount: int) -> str:
    return f"refunded {amount}"


def _refunds(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    if not [m for m in transcript if m["role"] == "tool"]:
        return {"type": "tool", "name": "refund", "args": {"amount": 250}}
    return {"type": "final", "content": "refunded"}


def _answers_in_json(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "final", "content": {"sum": 5, "unit": None, "exact": True}}


waiting_agent = Agent(_refunds, {"refund": refund}, name="shop", release="2")
json_agent = Agent(_answers_in_json, {}, name="jsonish")


def fill(url: str) -> datetime:
    """The runs of IDS in `url`'s database; the time they were (made to be) created."""
    then = datetime.now(UTC) - timedelta(days=2, minutes=30)
    with Runner(url) as runner:
        runner.run(solver_agent, "add 2 and 3", id="done-text")
        runner.run(json_agent, "answer in JSON", id="done-json")
        runner.fork("done-text", 1, id="forked")
        runner.submit(solver_agent, "plain", id="queued")
        runner.submit(
            solver_agent, "later", id="delayed", queue="batch", priority=5,
            delay=timedelta(days=3),
        )  # fmt: skip
        for held in ("stalled-expired", "stalled-dead", "live"):
            runner.run(solver_agent, "add 2 and 3", id=held)
        assert runner.run(waiting_agent, "refund 250", id="waiting").status == "waiting"
        with runner.engine.begin() as connection:
            for i, run_id in enumerate(reversed(IDS)):
                at = then + timedelta(seconds=i)
                connection.execute(
                    update(runs)
                    .where(runs.c.id == run_id)
                    .values(created_at=at, updated_at=at, last_seen_at=at, leased_at=at)
                )
                connection.execute(
                    update(entries).where(entries.c.run_id == run_id).values(created_at=at)
                )
            connection.execute(
                update(runs)
                .where(runs.c.status == "finished")
                .values(finished_at=then + timedelta(minutes=3))
            )
            connection.execute(
                update(runs).where(runs.c.id == "waiting").values(waiting_since=then)
            )
            # Held: the journal (two steps) says more than the row (nothing until the end).
            lease = {"status": "running", "stop_reason": None, "finished_at": None, "steps": 0,
                     "lease_epoch": 1}  # fmt: skip
            far = datetime.now(UTC) + timedelta(days=3)
            for run_id, owner, expiry in (
                ("live", this_process(), far),
                ("stalled-dead", DEAD_OWNER, far),  # a process of this host that is gone
                ("stalled-expired", "elsewhere:1:2:3", then),
            ):
                connection.execute(
                    update(runs)
                    .where(runs.c.id == run_id)
                    .values(lease_owner=owner, lease_expires_at=expiry, **lease)
                )
            connection.execute(
                update(runs)
                .where(runs.c.id == "live")
                .values(deadline=far + timedelta(days=1), cancel_requested=True)
            )
    return then
