"""Workers on several hosts, simulated on one machine, one of them cut off from PostgreSQL.

Each worker runs in a network, PID and UTS namespace of its own (`ip netns`, `unshare`),
with a hostname of its own, and reaches PostgreSQL over a veth pair through a small TCP
relay on the host side (the server listens on 127.0.0.1 only). A partition is the host
side of a worker's veth set down: its packets are dropped, silently, as on a real network.
A slow link is the relay holding each chunk (this kernel has no `netem`) and iptables'
`statistic` match dropping packets at random inside the worker's namespace.

Opt-in (root, iproute2, util-linux and iptables): RUNNER_MULTIHOST=1, which `.ci/run` sets. The test
prints a report of the takeover times (pytest -s shows it; `-rA` keeps it in the summary).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runner.core.journal import EntryKind
from runner.service.runner import Runner
from runner.sql.database import open_engine, upgrade
from runner.sql.runs import load_entries
from tests.conditions import wait_until

RUNNER = Path(sys.executable).parent / "runner"
AGENT = f"{Path(__file__).resolve().with_name('multihost_agents.py')}:agent"
LEASE = 4.0
POLL = 0.2
# A relay's extra delay each way on a slow link (200 ms a round trip).
SLOW_LINK_DELAY = 0.1
# The share of packets a slow link drops, each way.
SLOW_LINK_LOSS = 0.05

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.multihost,
    pytest.mark.skipif(
        os.environ.get("RUNNER_MULTIHOST") != "1",
        reason="multi-host namespaces: opt in with RUNNER_MULTIHOST=1 (root; .ci/run does)",
    ),
]


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


class Relay:
    """A TCP relay from `listen` (a host-side veth address) to PostgreSQL on 127.0.0.1.

    `delay` holds every chunk that long before passing it on (a slow link)."""

    def __init__(self, listen: str, target: tuple[str, int]) -> None:
        self.target = target
        self.delay = 0.0
        self.server = socket.create_server((listen, 0))
        self.port = self.server.getsockname()[1]
        self.closing = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.pumps: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.pairs.append((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                pump = threading.Thread(target=self._pump, args=(source, sink), daemon=True)
                pump.start()
                self.pumps.append(pump)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                if self.delay:
                    time.sleep(self.delay)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            # Either direction ending ends both: the other pump's recv returns, and each
            # pump closes the socket it read from.
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            source.close()

    def close(self) -> None:
        self.closing.set()
        self.server.close()
        for pair in self.pairs:
            for end in pair:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
        for pump in self.pumps:
            pump.join(10)


@dataclass
class Host:
    """A network namespace joined to this one by a veth pair: `outside` is the host side."""

    name: str  # the hostname its worker sees
    netns: str
    outside: str  # the host-side veth device
    outside_ip: str
    relay: Relay

    def partition(self) -> None:
        sh("ip", "link", "set", self.outside, "down")

    def heal(self) -> None:
        sh("ip", "link", "set", self.outside, "up")

    def lose(self, share: float) -> None:
        """Drop `share` of the packets in and out of the namespace, at random (TCP resends
        them after its retransmission timeout, as on a lossy link)."""
        for chain in ("INPUT", "OUTPUT"):
            sh(
                *("ip", "netns", "exec", self.netns, "iptables", "-A", chain),
                *("-m", "statistic", "--mode", "random", "--probability", f"{share:g}"),
                *("-j", "DROP"),
            )

    def dropped(self) -> int:
        """How many packets the loss rules dropped so far."""
        listing = subprocess.run(
            ["ip", "netns", "exec", self.netns, "iptables", "-L", "-n", "-v", "-x"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        rules = [line.split() for line in listing.splitlines()]
        # A rule's line: packets, bytes, target, ...
        return sum(int(rule[0]) for rule in rules if len(rule) > 2 and rule[2] == "DROP")


class Hosts:
    def __init__(self) -> None:
        self.hosts: list[Host] = []
        self.tag = uuid.uuid4().hex[:5]

    def add(self, name: str, pg_port: int) -> Host:
        n = len(self.hosts)
        netns, outside, inside = (f"rn{self.tag}{n}", f"rh{self.tag}{n}", f"ri{self.tag}{n}")
        subnet = f"10.{200 + int(self.tag[:2], 16) % 50}.{int(self.tag[2:4], 16)}"
        outside_ip, inside_ip = f"{subnet}.{4 * n + 1}", f"{subnet}.{4 * n + 2}"
        sh("ip", "netns", "add", netns)
        sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        sh("ip", "link", "set", inside, "netns", netns)
        sh("ip", "addr", "add", f"{outside_ip}/30", "dev", outside)
        sh("ip", "link", "set", outside, "up")
        sh("ip", "netns", "exec", netns, "ip", "addr", "add", f"{inside_ip}/30", "dev", inside)
        sh("ip", "netns", "exec", netns, "ip", "link", "set", inside, "up")
        sh("ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up")
        host = Host(name, netns, outside, outside_ip, Relay(outside_ip, ("127.0.0.1", pg_port)))
        self.hosts.append(host)
        return host

    def close(self) -> None:
        for host in self.hosts:
            host.relay.close()
            subprocess.run(["ip", "link", "del", host.outside], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)


class HostWorker:
    """`runner worker` on `host`: its own network, PID and UTS namespaces and hostname."""

    def __init__(self, host: Host, url: str, env: dict[str, str], log: Path) -> None:
        self.host = host
        self.log_path = log
        self._log: IO[bytes] = log.open("wb")
        command = " ".join(
            [
                f"hostname {host.name} &&",
                "exec",
                str(RUNNER),
                "worker",
                f"--db '{url}'",
                f"--lease {LEASE:g}",
                f"--poll {POLL:g}",
                "--concurrency 4",
            ]
        )
        self.proc = subprocess.Popen(
            [
                *("ip", "netns", "exec", host.netns),
                *("unshare", "--pid", "--fork", "--uts", "--mount-proc", "sh", "-c", command),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        # `unshare --fork` passes no signal on: SIGTERM goes to the worker itself, its child
        # (the shell exec'd it), whose exit code unshare returns.
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        os.kill(int(children.split()[0]), signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(
                f"worker on {self.host.name} did not stop:\n{self.log()}"
            ) from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _can_make_hosts() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    for command in ("ip", "unshare", "iptables"):
        if shutil.which(command) is None:
            return f"no {command} command"
    return None


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    why = _can_make_hosts()
    if why is not None:
        pytest.fail(f"RUNNER_MULTIHOST=1 but hosts cannot be made here: {why}")
    made = Hosts()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def database(postgres_database: str) -> Iterator[tuple[str, str, int]]:
    """A database of its own: (its name, the admin URL's user part, the server's port)."""
    name = f"runner_hosts_{uuid.uuid4().hex[:10]}"
    admin_url = make_url(postgres_database).set(database="test")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    local = make_url(postgres_database).set(database=name)
    engine = open_engine(local.render_as_string(hide_password=False))
    upgrade(engine)
    engine.dispose()
    try:
        yield local.render_as_string(hide_password=False), name, local.port or 5432
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def through(host: Host, local_url: str) -> str:
    """The database's URL as seen from inside `host`: through its relay."""
    url = make_url(local_url).set(host=host.outside_ip, port=host.relay.port)
    return url.render_as_string(hide_password=False)


def wait_for(condition: Callable[[], Any], timeout: float, what: Callable[[], str]) -> Any:
    return wait_until(condition, timeout=timeout, what=what, every=0.05)


def charges(ledger: Path) -> list[dict[str, Any]]:
    path = ledger / "charges.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_partitioned_worker_is_taken_over_fenced_out_and_serves_again(
    hosts: Hosts, database: tuple[str, str, int], tmp_path: Path
) -> None:
    local_url, _, pg_port = database
    a, b = hosts.add("host-a", pg_port), hosts.add("host-b", pg_port)
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    ledger.mkdir()
    env = {**os.environ, "RUNNER_TEST_LEDGER": str(ledger), "RUNNER_TEST_GATE": str(gate)}
    env.update(PYTHONUNBUFFERED="1")
    env.pop("RUNNER_DATABASE_URL", None)
    runner = Runner(local_url)
    workers: list[HostWorker] = []

    def logs() -> str:
        return "\n".join(f"--- {w.host.name}\n{w.log()}" for w in workers)

    def now() -> datetime:
        with runner.engine.connect() as connection:
            value: datetime = connection.execute(text("SELECT now()")).scalar_one()
            return value

    try:
        first = HostWorker(a, through(a, local_url), env, tmp_path / "a.log")
        workers.append(first)
        ids = [runner.submit(AGENT, f"charge {i}", id=f"cut-{i}") for i in range(4)]
        # Every run is in its non-idempotent tool call on host-a.
        wait_for(lambda: len(charges(ledger)) == 4, 60, logs)
        assert {c["host"] for c in charges(ledger)} == {"host-a"}
        second = HostWorker(b, through(b, local_url), env, tmp_path / "b.log")
        workers.append(second)
        wait_for(lambda: "serving" in second.log(), 60, logs)

        a.partition()
        cut_at = now()
        held = {run_id: runner.row(run_id) for run_id in ids}
        assert all("host-a" in (row.lease_owner or "") for row in held.values()), held
        gate.touch()  # host-a's tools end now, and cannot tell anyone

        finished = wait_for(
            lambda: (
                (rows := [runner.row(i) for i in ids])
                and all(r.stop_reason is not None for r in rows)
                and rows
            ),
            120,
            logs,
        )
        takeovers = []
        for row in finished:
            before = held[row.id]
            # One takeover, by host-b (lease epochs count claims; a finished run keeps none).
            assert row.lease_epoch == before.lease_epoch + 1, (row, before)
            assert f"run {row.id}" in second.log(), logs()
            assert before.lease_expires_at is not None and row.leased_at is not None
            # Taken over once the lease ran out, within one claim interval and a margin
            # for a loaded machine, never before.
            late = (row.leased_at - before.lease_expires_at).total_seconds()
            assert 0 <= late < POLL + 5.0, (row.id, late)
            takeovers.append((row.leased_at - cut_at).total_seconds())
            entries = [entry for entry, _ in load_entries(runner.engine, row.id)]
            # The partitioned worker wrote nothing after its lease ended: fenced.
            with runner.engine.connect() as connection:
                late_writes = connection.execute(
                    text(
                        "SELECT count(*) FROM entries WHERE run_id = :r AND lease_epoch = :e "
                        "AND created_at > :until"
                    ),
                    {"r": row.id, "e": before.lease_epoch, "until": before.lease_expires_at},
                ).scalar_one()
            assert late_writes == 0
            observations = [e for e in entries if e.kind is EntryKind.OBSERVATION]
            assert len(observations) == 1 and observations[0].is_error  # outcome unknown
            assert str(row.stop_reason) == "final"
        # No non-idempotent call ran twice: every charge started once, on host-a.
        started = Counter(c["run"] for c in charges(ledger) if c["event"] == "start")
        assert started == Counter({run_id: 1 for run_id in ids})

        # Healed, host-a serves again: with host-b gone, it takes and finishes new runs.
        a.heal()
        assert second.stop() == 0, logs()
        again = [runner.submit(AGENT, f"charge {i}", id=f"healed-{i}") for i in range(2)]
        rows = wait_for(
            lambda: (
                (done := [runner.row(i) for i in again])
                and all(r.stop_reason is not None for r in done)
                and done
            ),
            120,
            logs,
        )
        assert all(str(r.stop_reason) == "final" for r in rows)
        assert {c["host"] for c in charges(ledger) if c["run"] in again} == {"host-a"}
        assert "Traceback" not in first.log()

        # A slow link (200 ms a round trip through the relay, 5% of packets lost each way)
        # still runs correctly.
        a.relay.delay = SLOW_LINK_DELAY
        a.lose(SLOW_LINK_LOSS)
        slow_start = time.monotonic()
        slow = [runner.submit(AGENT, f"charge {i}", id=f"slow-{i}") for i in range(2)]
        wait_for(lambda: all(runner.row(i).stop_reason is not None for i in slow), 180, logs)
        slow_seconds = time.monotonic() - slow_start
        assert all(str(runner.row(i).stop_reason) == "final" for i in slow)
        dropped = a.dropped()
        assert dropped > 0  # the link did lose packets while the runs went through it
        assert first.stop() == 0, logs()

        runs_charged = Counter(c["run"] for c in charges(ledger) if c["event"] == "start")
        assert all(n == 1 for n in runs_charged.values()), runs_charged
        report = (
            f"multi-host: lease {LEASE:g} s, claim interval {POLL:g} s; takeover after the "
            f"partition: {', '.join(f'{t:.2f}' for t in sorted(takeovers))} s; "
            f"two runs over a 200 ms link losing {SLOW_LINK_LOSS:.0%} of packets: "
            f"{slow_seconds:.1f} s ({dropped} packets dropped)"
        )
        print(report, file=sys.stderr)
    finally:
        for worker in workers:
            worker.close()
        runner.close()
