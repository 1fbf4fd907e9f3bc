"""Acceptance: queues, limits, priorities and delays with real `runner worker` processes,
and `runner submit --from`, on SQLite and PostgreSQL.

Each run of the test agent (`queue_agents.py`) records, outside the database, when it
started and ended; overlaps of those spans are runs that ran at once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner.cli import main
from runner.core.status import RunStatus
from runner.service.runner import Runner
from tests.conditions import scaled, wait_until

RUNNER = Path(sys.executable).parent / "runner"
AGENT = f"{Path(__file__).resolve().with_name('queue_agents.py')}:agent"


def env(ledger: Path, think: float = 0.3) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    return {**clean, "RUNNER_TEST_LEDGER": str(ledger), "RUNNER_TEST_THINK": f"{think:g}"}


def runner_cli(
    db_url: str, ledger: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUNNER), *args, "--db", db_url],
        env=env(ledger),
        cwd=ledger,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def spans(ledger: Path) -> dict[str, dict[str, Any]]:
    """Each run's start, end and pid, by task."""
    found: dict[str, dict[str, Any]] = {}
    path = ledger / "spans.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        found.setdefault(record["run"], {})[record["event"]] = record["t"]
        found[record["run"]]["pid"] = record["pid"]
    return found


def most_at_once(found: dict[str, dict[str, Any]]) -> int:
    """The largest number of spans open at one moment (an end before a start at a tie)."""
    events = sorted(
        [(span["start"], 1) for span in found.values()]
        + [(span["end"], -1) for span in found.values()]
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def wait_finished(db_url: str, ids: list[str]) -> None:
    with Runner(db_url) as runner:

        def unfinished() -> list[str]:
            rows = {row.id: row for row in runner.list(limit=10_000)}
            return [i for i in ids if rows[i].status is not RunStatus.FINISHED]

        wait_until(
            lambda: not unfinished(), what=lambda: f"runs to finish: {unfinished()}", every=0.1
        )


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    folder = tmp_path / "ledger"
    folder.mkdir()
    return folder


def test_three_workers_never_run_more_of_a_queue_than_its_limit(
    db_url: str, ledger: Path, tmp_path: Path
) -> None:
    with Runner(db_url) as runner:
        runner.set_queue_limit("limited", 2)
    paths = [tmp_path / f"worker-{n}.log" for n in range(3)]
    logs = [path.open("wb") for path in paths]
    workers = [
        subprocess.Popen(
            [str(RUNNER), "worker", "--db", db_url, "--concurrency", "4", "--poll", "0.05"],
            env=env(ledger),
            cwd=ledger,
            stdout=log,
            stderr=log,
        )
        for log in logs
    ]
    try:
        # All three serve before any run is queued: on a loaded machine one worker could
        # otherwise be up seconds before the others and run every run alone, two of the
        # free queue at a time beside the limited queue's two.
        for path in paths:
            wait_until(
                lambda path=path: "serving" in path.read_text(),
                what=lambda path=path: f"{path.name} to serve:\n{path.read_text()}",
            )
        with Runner(db_url) as runner:
            ids = runner.submit_many(
                AGENT, [{"task": f"limited-{i}", "queue": "limited"} for i in range(12)]
            ).ids
            free = runner.submit_many(
                AGENT, [{"task": f"free-{i}", "queue": "free"} for i in range(6)]
            )
        wait_finished(db_url, [*ids, *free.ids])
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(scaled(30))
        for log in logs:
            log.close()
    found = spans(ledger)
    limited = {task: span for task, span in found.items() if task.startswith("limited")}
    assert len(limited) == 12
    assert most_at_once(limited) == 2  # never more; and the limit was reached
    # The unlimited queue was not held back: more of its runs ran at once.
    assert most_at_once({t: s for t, s in found.items() if t.startswith("free")}) > 2


def test_one_worker_claims_by_priority(db_url: str, ledger: Path) -> None:
    with Runner(db_url) as runner:
        for task, priority in [("low", -1), ("mid-1", 0), ("high", 7), ("mid-2", 0), ("top", 9)]:
            runner.submit(AGENT, task, id=task, priority=priority)
    done = runner_cli(db_url, ledger, "worker", "--once", "--concurrency", "1")
    assert done.returncode == 0, done.stderr
    found = spans(ledger)
    order = sorted(found, key=lambda task: found[task]["start"])
    assert order == ["top", "high", "mid-1", "mid-2", "low"]


def test_a_worker_serves_its_queues_and_no_delayed_run_early(db_url: str, ledger: Path) -> None:
    submit = ["submit", AGENT]
    for args in (
        ["in a", "--queue", "a", "--id", "a-now"],
        ["in b", "--queue", "b", "--id", "b-now"],
        ["later", "--queue", "a", "--in", "1h", "--id", "a-later"],
        ["overdue", "--queue", "a", "--at", "2020-01-01T00:00:00+01:00", "--id", "a-overdue"],
    ):
        done = runner_cli(db_url, ledger, *submit, *args)
        assert done.returncode == 0, done.stderr
    done = runner_cli(db_url, ledger, "worker", "--once", "--queue", "a,c")
    assert done.returncode == 0, done.stderr
    assert "queues a, c" in done.stderr
    assert set(spans(ledger)) == {"in a", "overdue"}
    with Runner(db_url) as runner:
        later = runner.row("a-later")
        assert later.status is RunStatus.QUEUED and later.not_before is not None
        assert later.not_before > runner.now()
        assert runner.row("b-now").status is RunStatus.QUEUED
        # What is left of the hour is what it was when `show` looked: read the clock on both
        # sides of it (a loaded machine may take minutes over the commands above).
        before_show = runner.now()
        shown = runner_cli(db_url, ledger, "show", "a-later")
        after_show = runner.now()
    starts = f"{later.not_before.astimezone(UTC):%Y-%m-%d %H:%M:%S}"
    said = re.search(
        rf"queue     a, priority 0, starts {starts} UTC \(in (\d+)m(\d\d)s\)", shown.stdout
    )
    assert said is not None, shown.stdout
    left = int(said.group(1)) * 60 + int(said.group(2))
    most, least = (later.not_before - moment for moment in (before_show, after_show))
    assert least.total_seconds() - 1 <= left <= most.total_seconds(), (left, least, most)
    listed = runner_cli(db_url, ledger, "queue", "list", "--json")
    kept = {"keep_seconds": None, "keep_runs": None, "older_releases": "continue"}
    assert json.loads(listed.stdout) == [
        {"name": "a", "limit": None, "queued": 0, "delayed": 1, "running": 0, "waiting": 0} | kept,
        {"name": "b", "limit": None, "queued": 1, "delayed": 0, "running": 0, "waiting": 0} | kept,
    ]


def test_submit_from_a_file_checks_every_line_first(db_url: str, ledger: Path) -> None:
    lines = [
        json.dumps({"task": "one", "id": "one"}),
        "",
        json.dumps({"task": "two", "queue": "q", "priority": 3, "in": "10m"}),
        json.dumps({"task": "three", "budgets": {"max_steps": 2}, "at": "2030-01-01T00:00"}),
    ]
    bad = [*lines, json.dumps({"task": "four", "priority": "urgent"})]
    refused = runner_cli(db_url, ledger, "submit", AGENT, "--from", "-", stdin="\n".join(bad))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "Error: line 5: priority must be a whole number, not 'urgent' (see 'runner submit --help')"
    ]
    broken = runner_cli(db_url, ledger, "submit", AGENT, "--from", "-", stdin="{\n")
    assert broken.returncode == 2 and "line 1: not JSON" in broken.stderr
    with Runner(db_url) as runner:
        assert runner.list() == []  # nothing of either was submitted

    tasks = ledger / "tasks.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    done = runner_cli(db_url, ledger, "submit", AGENT, "--from", str(tasks), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["submitted"] == 3 and report["existing"] == [] and report["ids"][0] == "one"
    with Runner(db_url) as runner:
        two, three = (runner.row(run_id) for run_id in report["ids"][1:])
        assert (two.queue, two.priority, two.not_before is not None) == ("q", 3, True)
        assert three.budgets["max_steps"] == 2 and three.not_before is not None
        assert three.not_before.isoformat() == "2030-01-01T00:00:00+00:00"  # naive: UTC
    again = runner_cli(db_url, ledger, "submit", AGENT, "--from", str(tasks))
    assert again.returncode == 0 and again.stdout.strip() == "submitted 2 runs (1 existed already)"
    clash = json.dumps({"task": "not one", "id": "one"})
    conflict = runner_cli(db_url, ledger, "submit", AGENT, "--from", "-", stdin=clash)
    assert conflict.returncode == 2
    assert conflict.stderr.startswith("Error: line 1: run one already exists with another task")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["submit", AGENT, "t", "--at", "2030-01-01", "--in", "1m"], "give --at or --in"),
        (["submit", AGENT, "t", "--in", "soon"], "not a duration: 'soon'"),
        (["submit", AGENT, "t", "--at", "tomorrow"], "not an ISO 8601 time"),
        (["submit", AGENT, "t", "--queue", "a,b"], "queue 'a,b' must be"),
        (["submit", AGENT], "give a TASK or --from FILE"),
        (["submit", AGENT, "--from", "-", "--id", "x"], "--id names one run"),
        (
            ["queue", "set", "q"],
            "give --limit N, --no-limit, --keep, --keep-runs or --older-releases",
        ),
        (["queue", "set", "q", "--keep", "soon"], "not a duration: 'soon'"),
        (["queue", "set", "*", "--limit", "2"], "'*' holds the default retention"),
        (["schedule", "add", "s", AGENT, "t", "--cron", "61 * * * *"], "Bad minute"),
        (["schedule", "add", "s", AGENT, "t", "--cron", "* * * *"], "must have five fields"),
        (["schedule", "add", "s", AGENT, "t", "--cron", "@daily", "--tz", "Nowhere"], "five"),
        (["queue", "set", "q", "--limit", "-2"], "a limit must be 0 or more"),
        (["worker", "--once", "--queue", "a,,b"], "queue '' must be"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    args: list[str], says: str, ledger: Path, tmp_path: Path
) -> None:
    done = runner_cli(f"sqlite:///{tmp_path / 'runner.db'}", ledger, *args, stdin="")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# -- the exact edges of what the columns hold --------------------------------------------------

LOWEST, HIGHEST = -(2**31), 2**31 - 1  # runs.priority is int4 on PostgreSQL


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["submit", AGENT, "t", "--queue", "q" * 65], f"queue '{'q' * 65}' must be 1 to 64"),
        (["submit", AGENT, "t", "--priority", str(HIGHEST + 1)],
         f"{HIGHEST + 1} is not in the range {LOWEST}<=x<={HIGHEST}"),
        (["submit", AGENT, "t", "--priority", str(LOWEST - 1)],
         f"{LOWEST - 1} is not in the range {LOWEST}<=x<={HIGHEST}"),
        (["queue", "set", "q" * 65, "--limit", "1"], f"queue '{'q' * 65}' must be 1 to 64"),
    ],
)  # fmt: skip
def test_one_past_the_columns_edges_is_a_one_line_usage_error(
    db_url: str, args: list[str], says: str
) -> None:
    """Issue 29: the exact edges (a 65-character queue name, priority 2**31 and -2**31 - 1),
    not only values far past them; the CLI is run in this process (CliRunner)."""
    done = CliRunner().invoke(main, [*args, "--db", db_url])
    assert done.exit_code == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    with Runner(db_url) as runner:
        assert (runner.list(), runner.queues()) == ([], [])


def test_the_columns_edges_themselves_are_taken_by_the_cli(db_url: str) -> None:
    longest = "q" * 64
    for run_id, priority in (("high", HIGHEST), ("low", LOWEST)):
        args = ["submit", AGENT, "t", "--id", run_id, "--queue", longest,
                "--priority", str(priority), "--db", db_url]  # fmt: skip
        done = CliRunner().invoke(main, args)
        assert (done.exit_code, done.stdout.strip()) == (0, run_id), done.stderr
    limited = CliRunner().invoke(main, ["queue", "set", longest, "--limit", "1", "--db", db_url])
    assert limited.exit_code == 0, limited.stderr
    with Runner(db_url) as runner:
        placed = [(runner.row(i).queue, runner.row(i).priority) for i in ("high", "low")]
        (listed,) = runner.queues()
    assert placed == [(longest, HIGHEST), (longest, LOWEST)]
    assert (listed.name, listed.limit) == (longest, 1)
