"""Acceptance: cancels that land, on SQLite and PostgreSQL. A worker holding a tree's
descendants (each in a tool that never ends) is SIGKILLed, as if on another host, and the
tree's root cancelled: the runs nobody holds finish at once, and those the dead worker held
under live leases are finished `cancelled` by another live worker (one serving another
queue: it never takes them over) as soon as their leases lapse, without a step run, within
the lease plus 2 s of the cancel (the figure is printed). A tree killed while its children
were being started, then cancelled: each child journals its task."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from runner import Runner
from runner.sql.database import connect
from runner.sql.schema import entries, runs
from tests.conditions import scaled, wait_until

from .harness import KILLED, RUNNER, cli, cli_env, described

AGENTS = Path(__file__).resolve().with_name("cancel_agents.py")
# Long enough that the cancel comes while the dead worker's leases still live (a worker's
# heartbeat renews them every third of it), so that a live worker's look must land it.
LEASE = 8.0


def worker(ledger: Path, name: str, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A `runner worker` with `args`, its log in the ledger folder (no pipe to fill)."""
    with (ledger / f"{name}.log").open("w") as log:
        return subprocess.Popen(
            [str(RUNNER), "worker", "--poll", "0.1", *args],
            env=env, cwd=ledger, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip


def tree(db_url: str, root: str) -> dict[str, Any]:
    engine = connect(db_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(runs).where(runs.c.root_id == root)).all()
    finally:
        engine.dispose()
    return {row.id: row for row in rows}


def kinds(db_url: str, run_id: str) -> list[str]:
    engine = connect(db_url)
    try:
        with engine.connect() as connection:
            found = connection.execute(
                select(entries.c.kind).where(entries.c.run_id == run_id).order_by(entries.c.seq)
            ).scalars()
            return list(found)
    finally:
        engine.dispose()


def elsewhere(db_url: str, run_ids: set[str]) -> None:
    """Make the runs' dead holder a process of another host, its leases as they were: this
    host knows its own dead processes (their leases hold nothing, and the cancel lands on
    their runs at once), another host's only by their leases' lapse."""
    engine = connect(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id.in_(run_ids))
                .values(lease_owner="another-host.example:4242:1:?")
            )
    finally:
        engine.dispose()


def test_a_cancel_lands_on_the_runs_a_killed_worker_held(db_url: str, ledger: Path) -> None:
    env = cli_env(db_url, ledger)
    submitted = cli(
        "submit", f"{AGENTS}:lead", "go", "--id", "lead", "--queue", "trees",
        db_url=db_url, ledger=ledger,
    )  # fmt: skip
    assert submitted.returncode == 0, described(submitted)
    holder = worker(
        ledger, "holder", "--queue", "trees", "--concurrency", "4", "--lease", f"{LEASE:g}",
        env=env,
    )  # fmt: skip
    # A live worker that serves another queue: it will never claim the tree's runs.
    other = worker(ledger, "other", "--queue", "elsewhere", env=env)
    runner = Runner(db_url)
    try:
        began = ledger / "cancel.ledger"
        wait_until(
            lambda: began.exists() and len(began.read_text().splitlines()) == 2,
            what="the hold child and grandchild in their tools",
        )
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(scaled(30)) == KILLED
        held = {line.split()[1] for line in began.read_text().splitlines()}
        elsewhere(db_url, held)
        journals = {run_id: kinds(db_url, run_id) for run_id in held}
        runner.cancel("lead")
        # The dead worker's leases live on: its runs are only asked to stop.
        asked = [runner.row(run_id) for run_id in held]
        assert all(row.status == "running" and row.cancel_requested for row in asked), [
            (row.id, row.status, row.cancel_requested, row.lease_expires_at) for row in asked
        ]

        def ended() -> dict[str, Any] | None:
            rows = tree(db_url, "lead")
            done = all(row.status == "finished" for row in rows.values())
            return rows if done else None

        rows = wait_until(
            ended, timeout=30, what=lambda: f"the tree finished: {tree(db_url, 'lead')}"
        )
        assert other.poll() is None  # the other worker lives, and never claimed them
    finally:
        runner.close()
        for process in (holder, other):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(scaled(30))
    assert len(rows) == 4 and held <= set(rows)
    assert {row.stop_reason for row in rows.values()} == {"cancelled"}
    # No step ran after the kill: each held run's journal is as the dead worker left it
    # (its tool call pending), and each tool began once.
    assert {run_id: kinds(db_url, run_id) for run_id in held} == journals
    assert all(journal[-1] == "action" for journal in journals.values()), journals
    assert len(began.read_text().splitlines()) == 2
    cancel_at = rows["lead"].finished_at
    late = max((rows[run_id].finished_at - cancel_at).total_seconds() for run_id in held)
    print(f"\nheld runs finished {late:.2f} s after the cancel (lease {LEASE:g} s)")
    assert late <= scaled(LEASE + 2), late


def test_children_cancelled_before_their_first_step_journal_their_task(
    db_url: str, ledger: Path
) -> None:
    killed = cli(
        "run", f"{AGENTS}:lead", "go", "--id", "early",
        db_url=db_url, ledger=ledger, fault="after_wait_commit@1",
    )  # fmt: skip
    assert killed.returncode == KILLED, described(killed)
    children = {k: v for k, v in tree(db_url, "early").items() if k != "early"}
    assert len(children) == 2 and all(row.status == "queued" for row in children.values())
    cancelled = cli("cancel", "early", db_url=db_url, ledger=ledger)
    assert cancelled.returncode == 0, described(cancelled)
    rows = tree(db_url, "early")
    assert {row.stop_reason for row in rows.values()} == {"cancelled"}
    assert {run_id: kinds(db_url, run_id) for run_id in children} == {
        run_id: ["task"] for run_id in children
    }
