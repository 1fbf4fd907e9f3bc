"""Acceptance: `runner worker` processes share one queue, survive crashes and stop gracefully.

Every test starts real worker processes (the installed `runner` script) against a real
database, SQLite or PostgreSQL (the `db_url` fixture), and checks the outcome two ways: the
database (status, stop reason, lease, journal) and the ledgers that the test agents write
outside it (`worker_agents.py`: who called the model for which step, which tool calls ran,
which side effects took place). Leases are short and polling is fast so the file stays quick.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, TypeVar

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner import Agent
from runner.core.journal import EntryKind
from runner.core.status import RunStatus
from runner.service.runner import Runner
from runner.sql.database import open_engine, upgrade
from runner.sql.runs import RunRow, load_entries
from tests import forked_runner
from tests.conditions import scaled, wait_until
from tests.forked_runner import RUNNER

AGENTS = Path(__file__).resolve().with_name("worker_agents.py")
AGENT = f"{AGENTS}:agent"

# What each mode of the test agent does (see worker_agents.py): its stop reason, the steps
# whose model call it makes, the steps that call a tool, and those whose tool has an effect.
EXPECTED = {
    "final": "final",
    "thinking": "final",
    "max_steps": "max_steps",
    "tool_errors": "tool_errors",
    "repeated_call": "repeated_call",
    "slow": "final",
}
MODEL_STEPS = {
    "final": [1, 2],
    "thinking": [1, 2],
    "max_steps": [1, 2, 3],
    "tool_errors": [1, 2],
    "repeated_call": [1, 2],
    "slow": [1, 2, 3],
}
TOOL_STEPS = {
    "final": [1],
    "thinking": [1],
    "max_steps": [1, 2, 3],
    "tool_errors": [1, 2],
    "repeated_call": [1],
    "slow": [1, 2],
}
EFFECT_STEPS = {**TOOL_STEPS, "tool_errors": []}
FAST_MODES = ["final", "max_steps", "tool_errors", "repeated_call"]

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], timeout: float, what: Callable[[], str]) -> T:
    return wait_until(condition, timeout=timeout, what=what, every=0.05)


def mode_of(run_id: str) -> str:
    return run_id.rsplit("-", 1)[0]


class WorkerProcess:
    """One `runner worker` subprocess, its stderr (and stdout) in a file of its own."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log: IO[bytes] = log.open("wb")
        self.proc = forked_runner.spawn(
            ["worker", *args], env=env, cwd=os.getcwd(), stdout=self._log, stderr=self._log
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """The exit code; `timeout`, enough on idle cores, is stretched by the load."""
        budget = scaled(timeout)
        try:
            return self.proc.wait(budget)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.pid} still running after {budget:.0f}s:\n{self.log()}"
            ) from None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM once it serves (its handlers are installed), and the exit code."""
        wait_for(lambda: "serving" in self.log() or not self.alive(), 30, self.log)
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class Cluster:
    """Worker processes on one database, a Runner to submit and read, and the ledgers."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder
        self.ledger = folder / "ledger"
        self.ledger.mkdir()
        self.runner = Runner(url)
        self.workers: list[WorkerProcess] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "RUNNER_TEST_LEDGER": str(self.ledger), "PYTHONUNBUFFERED": "1"}
        env.pop("RUNNER_FAULT", None)
        env.pop("RUNNER_DATABASE_URL", None)
        return {**env, **extra}

    def start(
        self,
        *args: str,
        slow: float = 0.5,
        lease: float = 30.0,
        serving: bool = True,
        gate: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """A worker with `args`; by default wait until it serves, so it shares the queue.

        The lease is long by default: a heartbeat held up by a loaded machine must not let
        it expire (a takeover the test did not ask for), and a worker killed on this host
        leaves its runs to the others at once anyway (its process is gone). A test of
        expiry passes a short one. With `gate`, the slow tool waits for that file instead
        of sleeping `slow` seconds. `env`: more of the worker's environment."""
        log = self.folder / f"worker-{len(self.workers)}.log"
        options = ["--db", self.url, "--poll", "0.1", "--lease", f"{lease:g}", *args]
        full = self.env(RUNNER_TEST_SLOW=f"{slow:g}", **(env or {}))
        if gate is not None:
            full["RUNNER_TEST_GATE"] = str(gate)
        worker = WorkerProcess(options, full, log)
        self.workers.append(worker)
        if serving:
            wait_for(lambda: "serving" in worker.log() or not worker.alive(), 30, worker.log)
            assert worker.alive(), worker.log()
        return worker

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        (done,) = self.cli_at_once(list(args))
        return done

    def cli_at_once(self, *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
        """Run `runner` commands side by side (each takes a second or two just to start)."""
        started = [
            subprocess.Popen(
                [str(RUNNER), *args, "--db", self.url],
                env=self.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in commands
        ]
        done = []
        for args, proc in zip(commands, started, strict=True):
            stdout, stderr = proc.communicate(timeout=scaled(60))
            done.append(subprocess.CompletedProcess(args, proc.returncode, stdout, stderr))
        return done

    def submit(self, mode: str, count: int = 1, start: int = 0) -> list[str]:
        """Queue runs `mode-NNN`; the task carries the id so the model can log it."""
        ids = [f"{mode}-{i:03d}" for i in range(start, start + count)]
        for run_id in ids:
            assert self.runner.submit(AGENT, f"{mode} {run_id}", id=run_id) == run_id
        return ids

    def row(self, run_id: str) -> RunRow:
        return self.runner.row(run_id)

    def rows(self) -> dict[str, RunRow]:
        return {row.id: row for row in self.runner.list(limit=100_000)}

    def logs(self) -> str:
        return "\n".join(f"--- worker {w.pid}\n{w.log()}" for w in self.workers)

    def wait_finished(self, ids: list[str], timeout: float = 60.0) -> dict[str, RunRow]:
        def done() -> dict[str, RunRow] | None:
            rows = self.rows()
            finished = all(rows[i].status is RunStatus.FINISHED for i in ids)
            return rows if finished else None

        def why() -> str:
            rows = self.rows()
            left = {i: (str(rows[i].status), rows[i].lease_owner) for i in ids}
            unfinished = {i: v for i, v in left.items() if v[0] != RunStatus.FINISHED}
            return f"unfinished runs {unfinished}\n{self.logs()}"

        return wait_for(done, timeout, why)

    def read(self, name: str) -> list[dict[str, Any]]:
        path = self.ledger / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def model_calls(self) -> list[dict[str, Any]]:
        return self.read("model.jsonl")

    def tool_begins(self) -> list[dict[str, Any]]:
        return [r for r in self.read("tools.jsonl") if r["event"] == "begin"]

    def in_tool(self, pid: int) -> list[dict[str, Any]]:
        """The tool calls process `pid` has begun and not returned from."""
        records = self.read("tools.jsonl")
        ended = {(r["key"], r["attempt"]) for r in records if r["event"] == "end"}
        return [
            r
            for r in records
            if r["event"] == "begin" and r["pid"] == pid and (r["key"], r["attempt"]) not in ended
        ]

    def effects(self) -> Counter[str]:
        return Counter(r["key"] for r in self.read("effects.jsonl") if r["event"] == "effect")

    def finished_lines(self, run_id: str) -> int:
        """How many times any worker logged finishing `run_id`."""
        return sum(w.log().count(f"run {run_id} finished:") for w in self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.runner.close()


def assert_outcomes(cluster: Cluster, rows: dict[str, RunRow], ids: list[str]) -> None:
    """Every run stopped for its mode's reason; every key-aware effect happened once."""
    reasons = {i: str(rows[i].stop_reason) for i in ids}
    assert reasons == {i: EXPECTED[mode_of(i)] for i in ids}, cluster.logs()
    for run_id in ids:
        row = rows[run_id]
        assert row.lease_owner is None and row.lease_expires_at is None, row
        assert row.steps == len(MODEL_STEPS[mode_of(run_id)]), row
    effects = cluster.effects()
    expected = Counter(f"{i}-{step}" for i in ids for step in EFFECT_STEPS[mode_of(i)])
    assert effects == expected  # nothing lost, nothing doubled


# -- submitting -----------------------------------------------------------------------------


def test_submit_queues_once_per_id_and_worker_once_drains(cluster: Cluster) -> None:
    first = cluster.cli("submit", AGENT, "final final-000", "--id", "final-000", "--json")
    assert first.returncode == 0, first.stderr
    queued = json.loads(first.stdout)
    assert (queued["id"], queued["status"], queued["worker"]) == ("final-000", "queued", None)

    # The same id again never creates a second run: the same request names the run, and
    # another task or budgets are refused (a usage error).
    again = cluster.cli("submit", AGENT, "final final-000", "--id", "final-000")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "final-000"
    assert cluster.runner.submit(AGENT, "final final-000", id="final-000") == "final-000"
    other_task = cluster.cli(
        "submit", AGENT, "final other", "--id", "final-000", "--max-steps", "1"
    )
    assert other_task.returncode == 2, other_task.stderr
    assert "already exists with another task, max_steps" in other_task.stderr

    # Budget flags reach the queued run.
    budgeted = cluster.cli("submit", AGENT, "max_steps x", "--max-steps", "2")
    assert budgeted.returncode == 0, budgeted.stderr
    other = budgeted.stdout.strip()
    rows = cluster.rows()
    assert sorted(rows) == sorted(["final-000", other])
    assert rows["final-000"].task == "final final-000"
    assert rows[other].budgets["max_steps"] == 2
    assert all(row.status is RunStatus.QUEUED for row in rows.values())

    worker = cluster.start("--once", "--concurrency", "2", "--connections", "2", serving=False)
    assert worker.wait(30) == 0, worker.log()
    assert "pool 2 connections for concurrency 2 (capped at 2;" in worker.log()
    rows = cluster.rows()
    assert str(rows["final-000"].stop_reason) == "final"
    assert (str(rows[other].stop_reason), rows[other].steps) == ("max_steps", 2)
    assert "stopped after finishing 2 runs" in worker.log()


# -- many workers, one queue ----------------------------------------------------------------


def test_workers_drain_a_queue_each_run_exactly_once(cluster: Cluster) -> None:
    # A long lease: no worker dies here, and a heartbeat held up by a busy machine must not
    # look like a crash (that is the kill tests' subject).
    workers = [cluster.start("--concurrency", "2", lease=10) for _ in range(3)]
    ids = [run for i in range(50) for run in cluster.submit(FAST_MODES[i % 4], start=i)]
    rows = cluster.wait_finished(ids, timeout=90)
    for worker in workers:
        assert worker.stop() == 0, worker.log()

    assert_outcomes(cluster, rows, ids)
    for run_id in ids:
        # Claimed exactly once (one epoch, never a takeover), finished exactly once.
        assert (rows[run_id].lease_epoch, rows[run_id].resumes) == (1, 0), rows[run_id]
        assert cluster.finished_lines(run_id) == 1, cluster.logs()

    # No step's model call or tool call was made twice (by one worker or two).
    calls = Counter((c["run"], c["step"]) for c in cluster.model_calls())
    assert calls == Counter((i, s) for i in ids for s in MODEL_STEPS[mode_of(i)])
    tools = Counter(t["key"] for t in cluster.tool_begins())
    assert tools == Counter(f"{i}-{s}" for i in ids for s in TOOL_STEPS[mode_of(i)])
    assert all(t["attempt"] == 1 for t in cluster.tool_begins())

    # The queue was shared, and each run's steps all ran in one worker.
    pids = {w.pid for w in workers}
    by_run: dict[str, set[int]] = {}
    for call in cluster.model_calls():
        by_run.setdefault(call["run"], set()).add(call["pid"])
    assert all(len(p) == 1 and p <= pids for p in by_run.values()), by_run
    assert len(set().union(*by_run.values())) >= 2, by_run


def test_sigkilled_worker_runs_are_finished_by_the_others(cluster: Cluster) -> None:
    # The victim's tool calls are long, so the kill surely lands inside one.
    victim = cluster.start("--concurrency", "2", slow=1.5)
    survivors = [cluster.start("--concurrency", "2", slow=0.3) for _ in range(2)]
    ids = [run for i in range(16) for run in cluster.submit(("slow", "final")[i % 2], start=i)]

    wait_for(lambda: cluster.in_tool(victim.pid), 30, cluster.logs)
    victim.signal(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL, victim.log()
    held = {
        i
        for i, row in cluster.rows().items()
        if row.lease_owner and f":{victim.pid}:" in row.lease_owner
    }
    interrupted = cluster.in_tool(victim.pid)  # killed inside these tool calls
    assert interrupted and {t["run"] for t in interrupted} <= held, (interrupted, held)

    rows = cluster.wait_finished(ids, timeout=60)
    for worker in survivors:
        assert worker.stop() == 0, worker.log()

    assert_outcomes(cluster, rows, ids)  # among others: no key-aware effect doubled
    asked_by: dict[str, set[int]] = {}
    for call in cluster.model_calls():
        asked_by.setdefault(call["run"], set()).add(call["pid"])
    for run_id in ids:
        # Finished once. A run the victim finished alone, just before the kill, may have
        # lost its log line to it (the line follows the commit); no run is logged twice.
        finished_by_victim = (
            run_id not in held and rows[run_id].resumes == 0 and asked_by[run_id] == {victim.pid}
        )
        lines = cluster.finished_lines(run_id)
        assert lines == 1 or (lines == 0 and finished_by_victim), cluster.logs()
    for run_id in held:
        assert rows[run_id].resumes == 1, rows[run_id]  # taken over after its lease expired
        assert f"run {run_id} finished" not in victim.log()

    survivor_pids = {w.pid for w in survivors}
    # A model call is repeated only if the dead worker made it and never recorded its action;
    # a step the dead worker recorded is never asked of the model again.
    by_step: dict[tuple[str, int], list[int]] = {}
    for call in cluster.model_calls():
        by_step.setdefault((call["run"], call["step"]), []).append(call["pid"])
    for step, pids in by_step.items():
        assert sum(pid in survivor_pids for pid in pids) <= 1, (step, pids)
    for call in interrupted:
        assert by_step[(call["run"], call["step"])] == [victim.pid], call

    # The tool calls the kill interrupted ran again with the same key (attempt 2). Their
    # effect happened once: absorbed by the key when the dead worker had applied it, applied
    # by the retry when the kill came between the call's start and its effect.
    begins: dict[str, list[tuple[int, int]]] = {}
    for call in cluster.tool_begins():
        begins.setdefault(call["key"], []).append((call["attempt"], call["pid"]))
    for key, attempts in begins.items():
        assert sum(pid in survivor_pids for _, pid in attempts) <= 1, (key, attempts)
    effects = cluster.read("effects.jsonl")
    for call in interrupted:
        retried = begins[call["key"]]
        assert retried[0] == (1, victim.pid) and retried[1][0] == 2, retried
        assert retried[1][1] in survivor_pids
        events = [r["event"] for r in effects if r["key"] == call["key"]]
        assert events in (["effect", "duplicate"], ["effect"]), events
        assert cluster.effects()[call["key"]] == 1


# -- graceful stop --------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_finishes_the_step_releases_at_once_and_exits_0(
    cluster: Cluster, signum: int
) -> None:
    # A 30 s lease: if the runs were left to expire, the second worker could not finish them
    # within this test's time limits. Only an explicit release lets it go on at once.
    first = cluster.start("--concurrency", "2", lease=30, slow=1.5)
    ids = cluster.submit("slow", 3)
    busy = wait_for(lambda: len(cluster.in_tool(first.pid)) == 2, 30, cluster.logs)
    assert busy
    in_flight = {t["run"] for t in cluster.in_tool(first.pid)}

    first.signal(signum)
    assert first.wait(15) == 0, first.log()
    log = first.log()
    assert "stopping gracefully" in log
    assert log.count("released for another worker") == 2, log
    # The step in flight was finished: its tool returned and its observation is journaled,
    # and the worker called the model for no further step.
    assert not cluster.in_tool(first.pid)
    for run_id in in_flight:
        row = cluster.row(run_id)
        assert (row.status, row.lease_owner, row.lease_expires_at) == (
            RunStatus.QUEUED,
            None,
            None,
        )
        journal = [entry for entry, _ in load_entries(cluster.runner.engine, run_id)]
        assert [(e.kind, e.step) for e in journal][-1] == (EntryKind.OBSERVATION, 1)
    assert {(c["run"], c["step"]) for c in cluster.model_calls()} == {(i, 1) for i in in_flight}
    (untouched,) = set(ids) - in_flight
    assert cluster.row(untouched).lease_epoch == 0

    second = cluster.start("--once", "--concurrency", "2", lease=30, slow=0.1, serving=False)
    assert second.wait(30) == 0, second.log()
    rows = cluster.rows()
    assert_outcomes(cluster, rows, ids)
    assert all(rows[i].resumes == 0 for i in ids)  # a release is not a crash
    calls = Counter((c["run"], c["step"], c["pid"]) for c in cluster.model_calls())
    expected = [
        (i, s, first.pid if i in in_flight and s == 1 else second.pid)
        for i in ids
        for s in (1, 2, 3)
    ]
    assert calls == Counter(expected)
    assert Counter(t["key"] for t in cluster.tool_begins()) == Counter(
        f"{i}-{s}" for i in ids for s in (1, 2)
    )


def test_a_graceful_stop_gives_up_a_model_call_that_never_answers(cluster: Cluster) -> None:
    # The model blocks for ever (a hung connection of a plain model callable): the first
    # SIGTERM still ends the worker, giving the call up and leaving the run to another.
    first = cluster.start(lease=30)
    (run_id,) = cluster.submit("stuck")
    wait_for(lambda: cluster.model_calls(), 30, cluster.logs)

    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0, first.log()  # never, before model calls were watched
    assert "released for another worker" in first.log()
    row = cluster.row(run_id)
    assert (row.status, row.lease_owner, row.stop_reason) == (RunStatus.QUEUED, None, None)
    kinds = [entry.kind for entry, _ in load_entries(cluster.runner.engine, run_id)]
    assert kinds == [EntryKind.TASK]  # no half answer: the next worker asks again


def test_cancel_reaches_a_model_call_that_never_answers(cluster: Cluster) -> None:
    # A short lease beats often, so the cancel is seen within a second or so of its write.
    worker = cluster.start(lease=3)
    (run_id,) = cluster.submit("stuck")
    wait_for(lambda: cluster.model_calls(), 30, cluster.logs)

    done = cluster.cli("cancel", run_id)
    assert done.returncode == 0, done.stderr
    row = cluster.wait_finished([run_id], timeout=60)[run_id]
    assert str(row.stop_reason) == "cancelled"
    assert worker.stop() == 0, worker.log()  # and the worker is free: it stops at once


def test_second_signal_exits_at_once_leaving_the_run_to_be_taken_over(cluster: Cluster) -> None:
    # A long lease: the run must be taken over because its holder is dead, not expired.
    first = cluster.start(lease=30, slow=5)
    (run_id,) = cluster.submit("slow")
    wait_for(lambda: cluster.in_tool(first.pid), 30, cluster.logs)

    first.signal(signal.SIGTERM)
    wait_for(lambda: "stopping gracefully" in first.log(), 10, first.log)
    first.signal(signal.SIGTERM)
    assert first.wait(10) == 128 + signal.SIGTERM, first.log()

    left = cluster.row(run_id)
    assert left.status is RunStatus.RUNNING and f":{first.pid}:" in (left.lease_owner or "")
    assert left.lease_expires_at is not None
    kinds = [entry.kind for entry, _ in load_entries(cluster.runner.engine, run_id)]
    # The call is pending: the 5 s tool call was not waited for (a graceful stop would have
    # recorded its observation before releasing).
    assert kinds == [EntryKind.TASK, EntryKind.ACTION]

    second = cluster.start(lease=2, slow=0.1)
    row = cluster.wait_finished([run_id], timeout=30)[run_id]
    assert second.stop() == 0, second.log()
    # The lease is left as it was; a worker on this host sees its holder is dead and takes
    # the run without waiting for the lease to expire (one elsewhere would wait).
    assert row.leased_at is not None and row.leased_at < left.lease_expires_at
    assert (str(row.stop_reason), row.resumes) == ("final", 1)
    attempts = [
        (t["attempt"], t["pid"]) for t in cluster.tool_begins() if t["key"] == f"{run_id}-1"
    ]
    assert attempts == [(1, first.pid), (2, second.pid)]
    assert [r["event"] for r in cluster.read("effects.jsonl") if r["key"] == f"{run_id}-1"] == [
        "effect",
        "duplicate",
    ]
    assert_outcomes(cluster, {run_id: row}, [run_id])


# -- runs that kill their workers -----------------------------------------------------------


def test_poison_run_ends_in_crash_loop_and_the_queue_goes_on(cluster: Cluster) -> None:
    (poisoned,) = cluster.submit("poison")
    # Runs whose model thinks for a while, as a real one does: one that shares a worker with
    # the poison dies before it records anything, exactly like the poison itself. It must
    # not be mistaken for a run that kills its workers.
    modes = ("thinking", "slow")
    ids = [run for i in range(8) for run in cluster.submit(modes[i % 2], start=i)]
    options = ("--concurrency", "2", "--max-resumes", "1")
    # One worker at a time, so the poison always has a neighbour in its process (several
    # workers share a queue in the tests above). Not waiting for "serving": the poison may
    # kill it before it prints that.
    workers = [cluster.start(*options, lease=1, slow=0.3, serving=False)]
    kills = 0

    def supervise() -> bool:
        # What systemd or Kubernetes would do: start a new worker when one dies.
        nonlocal kills
        for index, worker in enumerate(workers):
            if not worker.alive():
                assert worker.proc.returncode == -signal.SIGKILL, worker.log()
                kills += 1
                workers[index] = cluster.start(*options, lease=1, slow=0.3, serving=False)
        rows = cluster.rows()
        return all(rows[i].status is RunStatus.FINISHED for i in [poisoned, *ids])

    wait_for(supervise, 60, cluster.logs)
    for worker in workers:
        assert worker.stop() == 0, worker.log()

    rows = cluster.rows()
    assert str(rows[poisoned].stop_reason) == "crash_loop", cluster.logs()
    assert "times in a row without a new journal entry" in (rows[poisoned].error or "")
    # Bounded: the first claim, the takeover that found progress, then one takeover without
    # progress (--max-resumes 1); the next claim gave up without running it.
    attempts = [t["attempt"] for t in cluster.tool_begins() if t["tool"] == "poison"]
    assert attempts == [1, 2, 3]
    assert kills == 3
    assert f"run {poisoned} was taken over 1 time(s) in a row without" in cluster.logs()
    # Every other run finished normally, the poison's neighbours included.
    assert_outcomes(cluster, rows, ids)


# -- cancelling, loading, inspecting --------------------------------------------------------


def test_cancel_reaches_a_run_a_worker_is_executing(cluster: Cluster) -> None:
    gate = cluster.folder / "gate"  # the tool call of step 1 returns once it exists
    worker = cluster.start(gate=gate)
    (run_id,) = cluster.submit("slow")
    wait_for(lambda: cluster.in_tool(worker.pid), 60, cluster.logs)

    cancelled = cluster.cli("cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancel requested" in cancelled.stdout
    assert cluster.row(run_id).status is RunStatus.RUNNING  # held inside its tool call
    gate.touch()
    row = cluster.wait_finished([run_id], timeout=60)[run_id]
    # The step in flight completes; the model is asked nothing after the cancel.
    assert (str(row.stop_reason), row.steps) == ("cancelled", 1)
    assert [c["step"] for c in cluster.model_calls()] == [1]
    assert f"run {run_id} finished: cancelled" in worker.log()

    # The worker goes on serving.
    (later,) = cluster.submit("final")
    assert str(cluster.wait_finished([later], timeout=60)[later].stop_reason) == "final"
    assert worker.stop() == 0, worker.log()


def _unused_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "final", "content": "never called"}


def test_unloadable_agent_records_an_error_and_the_worker_keeps_serving(
    cluster: Cluster,
) -> None:
    # The submitter can build this agent; no worker can import it (a deploy that lags).
    missing = Agent(_unused_model, ref="worker_agents_not_deployed:agent")
    cluster.runner.submit(missing, "final bad-000", id="bad-000")
    ids = cluster.submit("final", 4)

    worker = cluster.start("--once", "--concurrency", "2", serving=False)
    assert worker.wait(30) == 0, worker.log()
    rows = cluster.rows()
    assert_outcomes(cluster, rows, ids)

    bad = rows["bad-000"]
    assert (bad.status, bad.lease_owner, bad.stop_reason) == (RunStatus.QUEUED, None, None)
    assert bad.error is not None
    assert "could not load the agent" in bad.error
    assert "worker_agents_not_deployed" in bad.error
    assert "run bad-000 released" in worker.log()
    assert "Traceback" not in worker.log()

    shown = cluster.cli("show", "bad-000")
    assert shown.returncode == 0, shown.stderr
    assert f"error     {bad.error}" in shown.stdout
    as_json = cluster.cli("show", "bad-000", "--json")
    assert json.loads(as_json.stdout)["error"] == bad.error


SLOW_IMPORT = """\
import time

from runner import Agent

time.sleep(1)  # a slow import: a client built, heavy libraries loaded


def model(transcript):
    return {"type": "final", "content": "loaded"}


agent = Agent(model)
"""


def test_runs_started_together_all_load_a_slow_agent_file(cluster: Cluster) -> None:
    # Every run of the batch starts while the first one is still executing the agent file:
    # none may find it half-loaded ("has no attribute 'agent'") and be released for it.
    path = cluster.folder / "slow_import.py"
    path.write_text(SLOW_IMPORT)
    ids = [f"slow-import-{i}" for i in range(8)]
    for run_id in ids:
        cluster.runner.submit(f"{path}:agent", "go", id=run_id)

    worker = cluster.start("--once", "--concurrency", "8", lease=30, serving=False)
    assert worker.wait(60) == 0, worker.log()
    rows = cluster.rows()
    assert "has no attribute" not in worker.log()
    assert "released" not in worker.log()
    for run_id in ids:
        row = rows[run_id]
        assert (str(row.stop_reason), row.output, row.error) == ("final", "loaded", None), row
        assert row.lease_epoch == 1  # claimed once: never released and claimed again
    assert "stopped after finishing 8 runs" in worker.log()


def test_list_and_show_name_the_worker_holding_a_run(cluster: Cluster) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    gate = cluster.folder / "gate"  # held inside its tool call until the test has looked
    worker = cluster.start(lease=30, gate=gate)
    (run_id,) = cluster.submit("slow")
    wait_for(lambda: cluster.in_tool(worker.pid), 60, cluster.logs)
    held = cluster.row(run_id)
    assert held.lease_owner is not None and held.leased_at is not None

    listed, shown, table, text = cluster.cli_at_once(
        ["list", "--json"], ["show", run_id, "--json"], ["list"], ["show", run_id]
    )
    for done in (listed, shown, table, text):
        assert done.returncode == 0, done.stderr
    (entry,) = [run for run in json.loads(listed.stdout) if run["id"] == run_id]
    detail = json.loads(shown.stdout)
    for data in (entry, detail):
        assert (data["status"], data["state"]) == ("running", "running")  # alive: not stalled
        assert f":{worker.pid}:" in data["worker"]
        since = datetime.fromisoformat(data["worker_since"])
        assert before <= since <= datetime.now(UTC)
        assert (data["worker"], since) == (held.lease_owner, held.leased_at)

    (line,) = [line for line in table.stdout.splitlines() if line.startswith(run_id)]
    # A heartbeat may have come within the last second: "seen just now".
    assert f"{held.lease_owner}, seen " in line and line.endswith((" ago", "seen just now"))
    assert f"worker    {held.lease_owner} since " in text.stdout
    gate.touch()
    assert str(cluster.wait_finished([run_id], timeout=60)[run_id].stop_reason) == "final"


# -- the database going away ----------------------------------------------------------------


@pytest.fixture
def outage_database(postgres_database: str) -> Iterator[tuple[str, Callable[[bool], None]]]:
    """A database of its own (the session's must stay up), and a switch that takes it down."""
    name = f"runner_outage_{uuid.uuid4().hex[:10]}"
    admin_url = make_url(postgres_database).set(database="test")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_database).set(database=name).render_as_string(hide_password=False)
    engine = open_engine(url)
    upgrade(engine)
    engine.dispose()

    def available(up: bool) -> None:
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(up).lower()}'))
            if not up:
                connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
                    ),
                    {"n": name},
                )

    try:
        yield url, available
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_worker_survives_a_database_outage(
    outage_database: tuple[str, Callable[[bool], None]], tmp_path: Path
) -> None:
    url, available = outage_database
    cluster = Cluster(url, tmp_path)
    try:
        worker = cluster.start("--concurrency", "2", lease=2, slow=0.6)
        ids = [run for i in range(12) for run in cluster.submit(("slow", "final")[i % 2], start=i)]
        (cut_off, *_) = wait_for(lambda: cluster.in_tool(worker.pid), 30, cluster.logs)

        available(False)
        try:
            wait_for(lambda: "database error" in worker.log(), 15, worker.log)
            # Longer than a lease: the runs cut off in flight expire during the outage.
            time.sleep(2.5)
            assert worker.alive(), worker.log()
        finally:
            available(True)

        rows = cluster.wait_finished(ids, timeout=60)
        assert worker.alive(), worker.log()
        assert worker.stop() == 0, worker.log()
        log = worker.log()
        assert "Traceback" not in log
        assert "not currently accepting connections" in log  # the cause, in one line
        assert_outcomes(cluster, rows, ids)
        # The run the outage cut off was resumed by the same worker once the database came
        # back. Whether its tool call ran again depends on where the outage struck: during
        # the call, its observation was never committed and the call ran again with its key
        # (attempt 2, the effect absorbed); just after, it was committed and did not.
        assert f"run {cut_off['run']} interrupted" in log
        assert rows[cut_off["run"]].resumes == 1
        attempts = [t["attempt"] for t in cluster.tool_begins() if t["key"] == cut_off["key"]]
        (observed,) = [
            entry
            for entry, _ in load_entries(cluster.runner.engine, cut_off["run"])
            if entry.kind is EntryKind.OBSERVATION and entry.idempotency_key == cut_off["key"]
        ]
        assert attempts in ([1], [1, 2]) and observed.attempt == attempts[-1]
        assert cluster.effects()[cut_off["key"]] == 1
    finally:
        cluster.close()
