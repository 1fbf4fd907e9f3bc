"""Acceptance: a run's journal as a resumable event stream (`Runner.events`, `runner tail`).

A real `runner run` process writes the journal; the follower is another process (`runner
tail --follow`) or this one (`Runner.events`, sync and async), on SQLite and PostgreSQL.
The run is held at its first tool call by the agents' gate file, so "the follower got the
entries committed so far while the run goes on" is a condition the test waits on, and the
rest comes once the test opens the gate.
"""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from runner import Event, Runner, RunNotFound
from tests.conditions import GENEROUS

from .agents import ANSWERS
from .harness import (
    agent_ref,
    cli,
    cli_env,
    described,
    journal,
    one_line_error,
    start,
    wait_for,
)


def _finished_run(db_url: str, ledger: Path, run_id: str) -> list[dict[str, Any]]:
    result = cli("run", agent_ref("ledgered"), run_id, "--id", run_id, db_url=db_url, ledger=ledger)
    assert result.returncode == 0, described(result)
    return journal(db_url, run_id)


def _held_run(db_url: str, ledger: Path, run_id: str) -> tuple[subprocess.Popen[str], Path]:
    """`runner run` of the ledgered agent in its own process, held at its first tool call
    (its task and first action committed) until the returned gate file exists."""
    gate = ledger / "gate"
    env = cli_env(db_url, ledger, gate=gate)
    worker = start("run", agent_ref("ledgered"), run_id, "--id", run_id, env=env, cwd=ledger)
    wait_for(lambda: len(journal(db_url, run_id)) >= 2, what="the run's first action")
    return worker, gate


def _finish(worker: subprocess.Popen[str]) -> None:
    out, err = worker.communicate(timeout=GENEROUS)
    assert worker.returncode == 0, f"exit {worker.returncode}\n{out}\n{err}"
    assert out.strip() == ANSWERS["ledgered"]


def test_after_n_gives_exactly_the_entries_after_n_in_order(db_url: str, ledger: Path) -> None:
    rows = _finished_run(db_url, ledger, "after-n")
    positions = [row["seq"] for row in rows]
    assert positions == list(range(len(rows)))
    with Runner(db_url) as runner:
        everything = list(runner.events("after-n"))
        assert [event.position for event in everything] == positions
        assert [str(event.entry.kind) for event in everything] == [row["kind"] for row in rows]
        for after in (0, 3, len(rows) - 2, len(rows) - 1, len(rows) + 5):
            got = [event.position for event in runner.events("after-n", after=after)]
            assert got == positions[after + 1 :], after
        # Following a finished run gives what is there and ends.
        followed = [event.position for event in runner.events("after-n", after=2, follow=True)]
        assert followed == positions[3:]

    tailed = cli("tail", "after-n", "--after", "4", "--json", db_url=db_url, ledger=ledger)
    assert tailed.returncode == 0, described(tailed)
    objects = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert [o["position"] for o in objects[:-1]] == positions[5:]
    assert [o["kind"] for o in objects[:-1]] == [row["kind"] for row in rows[5:]]
    assert all(o["event"] == "entry" and o["run_id"] == "after-n" for o in objects[:-1])
    end = objects[-1]
    assert (end["event"], end["position"], end["status"], end["stop_reason"]) == (
        "end", positions[-1], "finished", "final"
    )  # fmt: skip


def test_a_tail_in_another_process_follows_a_worker_to_its_stop(db_url: str, ledger: Path) -> None:
    worker, gate = _held_run(db_url, ledger, "followed")
    follower = start(
        "tail", "followed", "--follow", "--json", env=cli_env(db_url, ledger), cwd=ledger
    )
    assert follower.stdout is not None
    # The entries committed so far arrive while the worker is still held: live, not at its end.
    first = [json.loads(follower.stdout.readline()) for _ in range(2)]
    assert [(o["position"], o["kind"]) for o in first] == [(0, "task"), (1, "action")]
    assert worker.poll() is None and follower.poll() is None
    gate.touch()
    _finish(worker)
    out, err = follower.communicate(timeout=GENEROUS)
    assert follower.returncode == 0, f"{out}\n{err}"
    rest = [json.loads(line) for line in out.splitlines()]
    rows = journal(db_url, "followed")
    events, end = first + rest[:-1], rest[-1]
    assert [o["position"] for o in events] == [row["seq"] for row in rows]
    assert [o["kind"] for o in events] == [row["kind"] for row in rows]
    assert (end["event"], end["stop_reason"], end["output"]) == (
        "end", "final", ANSWERS["ledgered"]
    )  # fmt: skip

    # The same run as text: `show`'s lines for its entries, ending with its stop line.
    text = cli("tail", "followed", "--follow", db_url=db_url, ledger=ledger)
    assert text.returncode == 0, described(text)
    lines = text.stdout.splitlines()
    assert lines[0] == "user      followed"
    assert lines[-1] == "stopped   final: answered"
    shown = cli("show", "followed", db_url=db_url, ledger=ledger).stdout.splitlines()
    assert lines == shown[shown.index("user      followed") :]


def test_a_reader_that_reconnects_after_its_last_position_misses_nothing(
    db_url: str, ledger: Path
) -> None:
    worker, gate = _held_run(db_url, ledger, "reconnected")
    seen: queue.Queue[Event] = queue.Queue()
    with Runner(db_url) as runner:
        stream = runner.events("reconnected", follow=True, poll_seconds=0.05)
        reading = threading.Thread(target=lambda: [seen.put(event) for event in stream])
        reading.start()
        first = [seen.get(timeout=GENEROUS) for _ in range(2)]
        assert [event.position for event in first] == [0, 1]
        # The reader goes away mid-run (close ends its follow from another thread)...
        stream.close()
        reading.join(timeout=GENEROUS)
        assert not reading.is_alive()
        assert stream.position == 1
        gate.touch()
        # ... and comes back after the last position it saw, while the run goes on.
        resumed = list(runner.events("reconnected", after=stream.position, follow=True))
    _finish(worker)
    rows = journal(db_url, "reconnected")
    positions = [event.position for event in first + resumed]
    assert positions == [row["seq"] for row in rows]  # no duplicate, no gap
    assert resumed[-1].entry.content == ANSWERS["ledgered"]


def test_the_async_iterator_follows_a_run_to_its_end(db_url: str, ledger: Path) -> None:
    worker, gate = _held_run(db_url, ledger, "async")

    async def follow(runner: Runner) -> list[Event]:
        got = []
        async for event in runner.events("async", follow=True, poll_seconds=0.05):
            got.append(event)
            if event.position == 1:  # live: the worker is held until now
                assert worker.poll() is None
                gate.touch()
        return got

    with Runner(db_url) as runner:
        events = asyncio.run(asyncio.wait_for(follow(runner), GENEROUS))
    _finish(worker)
    rows = journal(db_url, "async")
    assert [event.position for event in events] == [row["seq"] for row in rows]
    assert [str(event.entry.kind) for event in events][-1] == "final"


def test_a_waiting_run_ends_the_tail_with_exit_4(db_url: str, ledger: Path) -> None:
    first = cli("run", agent_ref("gated"), "waits", "--id", "waits", db_url=db_url, ledger=ledger)
    assert first.returncode == 4, described(first)
    tailed = cli("tail", "waits", "--follow", db_url=db_url, ledger=ledger)
    assert tailed.returncode == 4, described(tailed)
    said = "  .. deposit: waits for a person's approval (answer below)"
    assert tailed.stdout.splitlines()[-1] == said
    assert "" not in tailed.stdout.splitlines()  # the wait entry itself prints no line
    assert "waiting: run waits needs approval of deposit" in tailed.stderr
    assert "  runner approve waits --call waits-1\n" in tailed.stderr


def test_a_missing_run_is_one_line_and_exit_1(db_url: str, ledger: Path) -> None:
    tailed = cli("tail", "nope", "--follow", db_url=db_url, ledger=ledger)
    assert tailed.returncode == 1, described(tailed)
    assert tailed.stdout == ""
    assert one_line_error(tailed.stderr) == "Error: no run with id nope"
    with Runner(db_url) as runner, pytest.raises(RunNotFound):
        runner.events("nope")
