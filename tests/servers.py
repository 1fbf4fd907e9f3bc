"""Servers the tests start beside the PostgreSQL they are given: a PgBouncer in transaction
pooling mode in front of it, and a streaming replica of it. Each is a session fixture
(`pgbouncer`, `replica`), registered by tests/conftest.py.

PgBouncer is Debian's `pgbouncer` package; the replica is made with `pg_basebackup -R` and
run with the server's own binaries (/usr/lib/postgresql/*/bin). Locally a missing piece
skips the tests that need it, saying why; under RUNNER_REQUIRE_POSTGRES=1 (or
RUNNER_REQUIRE_PGBOUNCER=1, RUNNER_REQUIRE_REPLICA=1), as in `.ci/run`, it fails instead.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

REQUIRE_POSTGRES = os.environ.get("RUNNER_REQUIRE_POSTGRES") == "1"
REQUIRE_PGBOUNCER = REQUIRE_POSTGRES or os.environ.get("RUNNER_REQUIRE_PGBOUNCER") == "1"
REQUIRE_REPLICA = REQUIRE_POSTGRES or os.environ.get("RUNNER_REQUIRE_REPLICA") == "1"
# How long a server the tests start may take to answer (a busy machine's start-up).
START_SECONDS = 60.0


@dataclass(frozen=True)
class Pooled:
    """The session's database through PgBouncer (`url`) and directly (`direct`)."""

    url: str
    direct: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def unavailable(reason: str, required: bool) -> None:
    """Skip (locally) or fail (where the suite requires it) for want of `reason`."""
    if required:
        pytest.fail(reason)
    pytest.skip(reason)


def _answers(url: str, deadline: float, process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until a `SELECT 1` through `url` succeeds (the server started)."""
    import psycopg

    parsed = make_url(url)
    while True:
        try:
            with psycopg.connect(
                host=parsed.host, port=parsed.port, user=parsed.username,
                dbname=parsed.database, connect_timeout=2, prepare_threshold=None,
            ) as connection:  # fmt: skip
                connection.execute("SELECT 1")
            return
        except psycopg.Error as exc:
            said = log.read_text() if log.exists() else ""
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the server at {url} did not start: {exc}\n{said}") from exc
            time.sleep(0.1)


def _run_as_postgres(folder: Path) -> dict[str, Any]:
    """PgBouncer and postgres refuse to run as root: as root, Popen's arguments that run
    them as `postgres` (the process itself, so that a signal reaches it), which then owns
    their folder."""
    if os.geteuid() != 0:
        return {}
    user = pwd.getpwnam("postgres")
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def start_pgbouncer(server_url: str) -> Iterator[str]:
    """A PgBouncer in transaction pooling mode before the server of `server_url`, on a
    free port, trust auth; yields the URL of the same database through it."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        unavailable("no pgbouncer here (Debian's `pgbouncer` package)", REQUIRE_PGBOUNCER)
    server = make_url(server_url)
    folder = Path(tempfile.mkdtemp(prefix="runner-pgbouncer-"))
    port = free_port()
    user = server.username or "postgres"
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\nmax_client_conn = 1000\ndefault_pool_size = 20\n"
        f"logfile = {folder / 'pgbouncer.log'}\npidfile = {folder / 'pgbouncer.pid'}\n"
    )
    process = subprocess.Popen(
        [binary, str(folder / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        **_run_as_postgres(folder),
    )
    url = server.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    try:
        _answers(url, time.monotonic() + START_SECONDS, process, folder / "pgbouncer.log")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


# Settings a standby may not hold below its primary's (PostgreSQL refuses to recover).
_AT_LEAST_THE_PRIMARYS = (
    "max_connections", "max_worker_processes", "max_wal_senders",
    "max_prepared_transactions", "max_locks_per_transaction",
)  # fmt: skip


def _postgres_binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def start_replica(server_url: str) -> Iterator[str]:
    """A streaming replica of the server of `server_url` (`pg_basebackup -R` into a new
    folder, started on a free port); yields the URL of the same database on it."""
    import psycopg

    binaries = _postgres_binaries()
    if binaries is None:
        unavailable("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin", REQUIRE_REPLICA)
        return
    server = make_url(server_url)
    host, port, user = server.host or "127.0.0.1", server.port or 5432, server.username
    try:
        with psycopg.connect(
            host=host, port=port, user=user, dbname="replication", replication="true",
            connect_timeout=5,
        ):  # fmt: skip
            pass
        # A standby must allow at least what its primary does, or its recovery stops.
        with psycopg.connect(host=host, port=port, user=user, dbname=server.database) as primary:
            settings = {
                name: primary.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                for name in _AT_LEAST_THE_PRIMARYS
            }
    except psycopg.Error as exc:
        unavailable(
            f"the server refuses a replication connection from 127.0.0.1 ({exc}): "
            "pg_hba.conf needs `host replication all 127.0.0.1/32 trust` (.ci/run adds it)",
            REQUIRE_REPLICA,
        )
    folder = Path(tempfile.mkdtemp(prefix="runner-replica-"))
    data = folder / "data"
    for _ in range(3):  # another test may end the server's sessions (pg_terminate_backend)
        backup = subprocess.run(
            [str(binaries / "pg_basebackup"), "-h", host, "-p", str(port), "-U",
             user or "postgres", "-D", str(data), "-R", "-X", "stream", "-c", "fast",
             "--no-sync"],
            capture_output=True, text=True,
        )  # fmt: skip
        if backup.returncode == 0:
            break
    if backup.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        unavailable(f"pg_basebackup failed: {backup.stderr.strip()}", REQUIRE_REPLICA)
    replica_port = free_port()
    # Debian keeps the configuration apart (/etc/postgresql): the copy has none of its own.
    (data / "postgresql.conf").write_text(
        f"port = {replica_port}\nlisten_addresses = '127.0.0.1'\n"
        f"unix_socket_directories = '{folder}'\nhot_standby = on\n"
        # A throwaway copy: no fsync (which also skips recovery's sync of every file).
        "shared_buffers = 32MB\nhot_standby_feedback = on\nfsync = off\n"
        + "".join(f"{name} = {value}\n" for name, value in settings.items())
    )
    (data / "pg_ident.conf").write_text("")
    (data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
    os.chmod(data, 0o700)
    log = folder / "replica.log"
    log.touch()
    as_postgres = _run_as_postgres(folder)
    with log.open("wb") as written:
        process = subprocess.Popen(
            [str(binaries / "postgres"), "-D", str(data)],
            stdout=written,
            stderr=subprocess.STDOUT,
            **as_postgres,
        )
    url = server.set(host="127.0.0.1", port=replica_port).render_as_string(hide_password=False)
    try:
        _answers(url, time.monotonic() + START_SECONDS, process, log)
        yield url
    finally:
        process.send_signal(signal.SIGINT)  # a fast shutdown: its clients are cut off
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer(postgres_database: str) -> Iterator[Pooled]:
    """The session's PostgreSQL database through a PgBouncer in transaction mode."""
    for url in start_pgbouncer(postgres_database):
        yield Pooled(url, postgres_database)


@pytest.fixture(scope="session")
def replica(postgres_database: str) -> Iterator[str]:
    """The session's PostgreSQL database on a streaming replica of its server."""
    yield from start_replica(postgres_database)
