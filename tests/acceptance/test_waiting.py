"""Acceptance: runs that wait for a person, through the real `runner` command and workers.

A run reaches a call that needs approval, exits 4 (or blocks with --wait), shows what it
waits for and how to answer it; answers race as real processes and exactly one wins; a pool
of workers and a separate answering process take 30 runs through their waits; on
PostgreSQL a NOTIFY wakes an idle worker at once; approval_timeout holds with no process
running the run. Every test runs on SQLite and PostgreSQL (`db_url`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import text, update

from runner.cli import main
from runner.core.status import RunStatus
from runner.sql.database import open_engine
from runner.sql.runs import load_entries
from runner.sql.schema import runs

from .harness import one_line_error
from .test_workers import AGENT, RUNNER, Cluster, wait_for

ANSWERER = Path(__file__).with_name("answerer.py")


def answers_of(cluster: Cluster, run_id: str) -> list[str]:
    journal = load_entries(cluster.runner.engine, run_id)
    return [str(entry.answer) for entry, _ in journal if entry.kind == "answer"]


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- the CLI --------------------------------------------------------------------------------


def invoke(cluster: Cluster, *args: str) -> Result:
    """`runner ARGS --db URL` in this process (quick): for what the exit code and the output
    say; what a real process prints is checked with `cluster.cli`."""
    env = {"RUNNER_TEST_LEDGER": str(cluster.ledger)}
    result = CliRunner().invoke(main, [*args, "--db", cluster.url], env=env, prog_name="runner")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"runner {' '.join(args)} raised:\n{trace}")
    return result


def test_a_real_run_exits_4_at_its_wait_and_prints_how_to_answer(cluster: Cluster) -> None:
    first = cluster.cli("run", AGENT, "approval w-0", "--id", "w-0")
    assert (first.returncode, first.stdout) == (4, ""), first.stderr
    assert "Traceback" not in first.stderr
    assert "step 1  tool approved  waits for approval: approved(n=1)" in first.stderr
    assert "waiting: run w-0 needs approval of approved(n=1)" in first.stderr
    assert "  runner approve w-0 --call w-0-1\n" in first.stderr
    assert "  runner deny w-0 --call w-0-1 --reason TEXT\n" in first.stderr


def test_the_cli_waits_answers_resumes_and_refuses_bad_answers_in_one_line(
    cluster: Cluster,
) -> None:
    for run_id in ("w-1", "b-1"):
        started = invoke(cluster, "run", AGENT, f"approval {run_id}", "--id", run_id)
        assert (started.exit_code, started.stdout) == (4, ""), started.output
    assert "runner approve w-1 --call w-1-1" in invoke(cluster, "show", "w-1").stdout
    as_json = invoke(cluster, "run", AGENT, "approval w-2", "--id", "w-2", "--json")
    assert as_json.exit_code == 4
    shown = json.loads(as_json.stdout)
    assert (shown["status"], shown["stop_reason"]) == ("waiting", None)
    assert shown["waiting"]["call"] == "w-2-1"
    assert shown["waiting"]["answer_with"] == [
        "runner approve w-2 --call w-2-1",
        "runner deny w-2 --call w-2-1 --reason TEXT",
    ]
    row = cluster.row("w-1")
    assert (row.status, row.lease_owner) == (RunStatus.WAITING, None)

    table = lines(invoke(cluster, "list", "--status", "waiting").stdout)
    assert table[0].split() == ["ID", "WAITS", "FOR", "CALL", "SINCE", "ANSWER", "WITH"]
    assert sorted(line.split()[0] for line in table[1:]) == ["b-1", "w-1", "w-2"]
    assert "runner approve w-1 --call w-1-1" in table[-1] + table[-2] + table[-3]
    listed = json.loads(invoke(cluster, "list", "--json").stdout)
    assert {r["id"]: r["waiting"]["call"] for r in listed} == {
        "w-1": "w-1-1", "w-2": "w-2-1", "b-1": "b-1-1"
    }  # fmt: skip
    shown_run = invoke(cluster, "show", "w-1").stdout
    assert "waiting   approval of approved(n=1) (call w-1-1) since " in shown_run
    assert shown_run.rstrip().endswith(".. approved: waits for a person's approval (see above)")
    resumed = invoke(cluster, "resume", "w-1")
    assert (resumed.exit_code, resumed.stdout) == (4, "")  # still waiting: nothing claimed
    assert cluster.row("w-1").lease_epoch == row.lease_epoch

    bad = {
        ("approve", "nope"): (1, "Error: no run with id nope"),
        ("reply", "b-1", "yes"): (1, "waits for approval of approved(n=1), not a reply"),
        ("deny", "b-1", "--reason", " "): (2, "'--reason': must not be empty"),
        ("deny", "b-1"): (2, "Missing option '--reason'"),
        ("reply", "b-1", ""): (2, "Invalid value for 'TEXT': must not be empty"),
        ("approve", "b-1", "--call", "b-1-9"): (1, "waits for call b-1-1"),
    }
    for args, (code, message) in bad.items():
        result = invoke(cluster, *args)
        assert result.exit_code == code, (args, result.output)
        assert message in one_line_error(result.stderr), (args, result.stderr)
    assert answers_of(cluster, "b-1") == []

    approved = invoke(cluster, "approve", "w-1", "--call", "w-1-1", "--note", "ok", "--by", "ann")
    assert approved.exit_code == 0, approved.output
    assert approved.stdout.startswith("run w-1: call w-1-1 approved by ann; the run is queued")
    again = invoke(cluster, "approve", "w-1", "--json")
    assert again.exit_code == 1
    assert "call w-1-1 was already approved by ann at " in one_line_error(again.stderr)
    denied = invoke(cluster, "deny", "w-2", "--reason", "too much", "--json")
    assert denied.exit_code == 0, denied.output
    assert json.loads(denied.stdout)["answer"] == "denied"
    cancelled = invoke(cluster, "cancel", "b-1")  # a waiting run holds no worker: at once
    assert cancelled.stdout == "run b-1 is finished: cancelled\n", cancelled.output

    one, two = invoke(cluster, "resume", "w-1"), invoke(cluster, "resume", "w-2")
    assert (one.exit_code, one.stdout) == (0, "done w-1\n"), one.output
    assert (two.exit_code, two.stdout) == (0, "denied w-2: Denied: too much\n"), two.output
    late = invoke(cluster, "approve", "b-1")
    assert late.exit_code == 1
    assert one_line_error(late.stderr) == (
        "Error: run b-1 is finished (cancelled): it waits for no answer"
    )
    assert cluster.effects() == Counter({"w-1-1": 1})  # the denied and cancelled calls never ran


RACES = {
    "two approvers": (["approve"], ["approve"]),
    "approve and deny": (["approve"], ["deny", "--reason", "no"]),
    "approve and cancel": (["approve"], ["cancel"]),
}


def test_racing_answers_from_real_processes_exactly_one_wins(cluster: Cluster) -> None:
    """Every race at once, as real processes, two rounds: one answer per run, always."""
    rounds = 2
    runs_ = {
        f"{name.replace(' ', '_')}-{i}": race for name, race in RACES.items() for i in range(rounds)
    }
    for run_id in runs_:
        assert cluster.runner.submit(AGENT, f"approval {run_id}", id=run_id) == run_id
    # A worker takes each run to its wait and is done: the races run with no worker at all.
    first = cluster.start("--once", "--concurrency", "4", serving=False)
    assert first.wait(60) == 0, first.log()
    assert all(cluster.row(r).status is RunStatus.WAITING for r in runs_), cluster.logs()
    commands = [[a[0], run_id, *a[1:]] for run_id, race in runs_.items() for a in race]
    results = dict(zip(
        [(c[1], i % 2) for i, c in enumerate(commands)], cluster.cli_at_once(*commands), strict=True
    ))  # fmt: skip
    drain = cluster.start("--once", "--concurrency", "4", serving=False)
    assert drain.wait(60) == 0, drain.log()
    rows = cluster.rows()

    effects = cluster.effects()
    for run_id, race in runs_.items():
        first, second = results[(run_id, 0)], results[(run_id, 1)]
        recorded = answers_of(cluster, run_id)
        if race[1][0] == "cancel":
            assert second.returncode == 0, second.stderr  # a cancel is always honoured
            assert rows[run_id].stop_reason == "cancelled"
            if first.returncode == 0:  # approved first: the cancel then finished it, queued
                assert recorded == ["approved"]
            else:
                assert "finished (cancelled)" in one_line_error(first.stderr)
                assert recorded == []
            assert effects[f"{run_id}-1"] == 0  # cancelled before the call could run
            continue
        codes = sorted([first.returncode, second.returncode])
        assert codes == [0, 1], (first, second)
        loser = first if first.returncode else second
        assert len(recorded) == 1
        # The loser is told what won (the run may be queued again, or already finished).
        error = one_line_error(loser.stderr)
        assert f"call {run_id}-1 was already {recorded[0]} by " in error, error
        ran = recorded == ["approved"]
        assert effects[f"{run_id}-1"] == (1 if ran else 0)  # never twice
        expected = f"done {run_id}" if ran else f"denied {run_id}: Denied: no"
        assert rows[run_id].output == expected


def test_run_with_wait_blocks_until_another_process_answers(cluster: Cluster) -> None:
    blocked = subprocess.Popen(
        [str(RUNNER), "run", AGENT, "approval x-1", "--id", "x-1", "--wait", "--db", cluster.url],
        env=cluster.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: cluster.rows().get("x-1") and cluster.row("x-1").status is RunStatus.WAITING,
            60,
            lambda: "x-1 never waited",
        )
        assert blocked.poll() is None  # still there, waiting
        approved = cluster.cli("approve", "x-1")
        assert approved.returncode == 0, approved.stderr
        stdout, stderr = blocked.communicate(timeout=60)
    finally:
        if blocked.poll() is None:
            blocked.kill()
    assert (blocked.returncode, stdout) == (0, "done x-1\n"), stderr
    assert "waits for approval: approved(n=1)" in stderr
    assert cluster.effects() == Counter({"x-1-1": 1})


# -- workers --------------------------------------------------------------------------------


def test_a_pool_takes_30_waiting_runs_through_answers_in_random_order(cluster: Cluster) -> None:
    """30 runs wait; a separate process answers them in random order (every third denied);
    two workers finish them all: each approved call ran exactly once, no denied call ran."""
    workers = [cluster.start("--concurrency", "4") for _ in range(2)]
    ids = [f"pool-{i:02d}" for i in range(30)]
    for run_id in ids:
        cluster.runner.submit(AGENT, f"approval {run_id}", id=run_id)
    answerer = subprocess.run(
        [sys.executable, str(ANSWERER), cluster.url, "11", *ids],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert answerer.returncode == 0, answerer.stderr
    answered = dict(line.split()[::-1] for line in answerer.stdout.splitlines())
    assert sorted(answered) == ids
    assert [line.split()[1] for line in answerer.stdout.splitlines()] != ids  # not in order
    rows = cluster.wait_finished(ids, timeout=90)
    for worker in workers:
        assert worker.stop() == 0, worker.log()

    denied = {run_id for i, run_id in enumerate(ids) if i % 3 == 0}
    assert {r for r, verdict in answered.items() if verdict == "denied"} == denied
    effects = cluster.effects()
    for run_id in ids:
        row = rows[run_id]
        assert (row.status, row.stop_reason, row.lease_owner) == ("finished", "final", None)
        assert answers_of(cluster, run_id) == ["denied" if run_id in denied else "approved"]
        if run_id in denied:
            assert row.output == f"denied {run_id}: Denied: not {run_id}"
            assert effects[f"{run_id}-1"] == 0
        else:
            assert row.output == f"done {run_id}"
            assert effects[f"{run_id}-1"] == 1
        # Claimed twice, never taken over: once to its wait, once after the answer.
        assert (row.lease_epoch, row.resumes) == (2, 0), row
    begins = Counter(t["key"] for t in cluster.tool_begins())
    assert begins == Counter(f"{r}-1" for r in ids if r not in denied)  # each call once
    # Each run gave its worker slot back when it began to wait (8 slots, 30 runs).
    released = sum(w.log().count("waits for approval of approved(n=1)") for w in workers)
    assert released == 30, cluster.logs()


def test_an_expired_wait_is_denied_by_a_worker_with_nothing_else_running(
    cluster: Cluster,
) -> None:
    submitted = cluster.cli(
        "submit", AGENT, "approval late-1", "--id", "late-1", "--approval-timeout", "3600"
    )
    assert submitted.returncode == 0, submitted.stderr
    first = cluster.start("--once", serving=False)
    assert first.wait(60) == 0, first.log()  # took it to its wait, then had nothing to do
    row = cluster.row("late-1")
    assert row.status is RunStatus.WAITING and row.wait_expires_at is not None
    assert row.wait_expires_at - row.waiting_since == timedelta(seconds=3600)  # type: ignore[operator]
    # The hour passes with no process at all for the run (moved in the table, not slept).
    engine = open_engine(cluster.url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(runs)
                .where(runs.c.id == "late-1")
                .values(wait_expires_at=datetime.now(UTC) - timedelta(seconds=1))
            )
    finally:
        engine.dispose()
    second = cluster.start("--once", serving=False)
    assert second.wait(60) == 0, second.log()
    row = cluster.row("late-1")
    assert (row.status, row.output) == ("finished", "denied late-1: Denied: no answer within 3600s")
    assert answers_of(cluster, "late-1") == ["timed_out"]
    assert cluster.effects() == Counter()


@pytest.fixture
def pg_cluster(postgres_database: str, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster on PostgreSQL only (its session database, emptied of other tests' runs)."""
    engine = open_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("TRUNCATE runs, entries CASCADE"))
    engine.dispose()
    workers = Cluster(postgres_database, tmp_path)
    try:
        yield workers
    finally:
        workers.close()


@pytest.mark.postgres
def test_notify_starts_a_queued_or_answered_run_at_once_on_postgres(pg_cluster: Cluster) -> None:
    """With a 600 s poll, only a NOTIFY can get a run going within the test's waits (SQLite
    has no notifications: its workers poll)."""
    cluster = pg_cluster
    worker = cluster.start("--poll", "600", env={"RUNNER_LOG_LEVEL": "debug"})
    assert "(woken by NOTIFY)" in worker.log()

    def idle_after(line: str) -> bool:
        """The worker has looked at the queue, found nothing, and sleeps, since `line`."""
        log = worker.log()
        return "nothing to claim: idle" in log[log.index(line) :] if line in log else False

    wait_for(lambda: idle_after("serving"), 60, worker.log)  # its first look found nothing
    cluster.submit("final", 1)
    wait_for(lambda: cluster.row("final-000").status is RunStatus.FINISHED, 60, worker.log)

    cluster.runner.submit(AGENT, "approval n-1", id="n-1")
    wait_for(lambda: cluster.row("n-1").status is RunStatus.WAITING, 60, worker.log)
    # The worker gave the waiting run back and went to sleep again.
    wait_for(lambda: idle_after("run n-1 waits"), 60, worker.log)
    cluster.runner.approve("n-1")
    wait_for(lambda: cluster.row("n-1").status is RunStatus.FINISHED, 60, worker.log)
    assert cluster.row("n-1").output == "done n-1"
    assert worker.stop() == 0, worker.log()
