"""The tests' forked `runner` commands (tests/forked_runner.py) behave as exec'd ones: the
same output and exit codes, their own process, folder and environment, a real SIGKILL; and
a command that needs a fresh interpreter gets one."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests import forked_runner
from tests.conditions import wait_until
from tests.forked_runner import PIPE, Forked

from .harness import KILLED, RUNNER, cli_env

pytestmark = pytest.mark.skipif(
    forked_runner.exec_wanted(), reason="RUNNER_TEST_EXEC=1: every command is exec'd"
)


def execd(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUNNER), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args",
    [["--help"], ["show", "nobody"], ["list", "--status", "nonsense"]],
    ids=["help", "unknown-run", "bad-option"],
)
def test_a_forked_command_prints_and_exits_as_an_execd_one(
    args: list[str], db_url: str, ledger: Path
) -> None:
    env = cli_env(db_url, ledger)
    forked = forked_runner.run(args, env=env, cwd=ledger, timeout=120)
    direct = execd(args, env, ledger)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        direct.returncode,
        direct.stdout,
        direct.stderr,
    )
    assert forked.stdout or forked.stderr  # each says something


def test_a_forked_command_has_its_own_folder_and_environment(tmp_path: Path) -> None:
    """A relative SQLite path from the environment lands in the command's own folder."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    env = {**cli_env(None, tmp_path), "RUNNER_DATABASE_URL": "sqlite:///relative.db"}
    listed = forked_runner.run(["db", "upgrade"], env=env, cwd=folder, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert (folder / "relative.db").exists() and not (tmp_path / "relative.db").exists()


def test_a_forked_worker_is_a_process_of_its_own_that_a_sigkill_ends(
    db_url: str, ledger: Path
) -> None:
    log = ledger / "worker.log"
    with log.open("wb") as out:
        worker = forked_runner.spawn(
            ["worker", "--poll", "0.1"], env=cli_env(db_url, ledger), cwd=ledger,
            stdout=out, stderr=out,
        )  # fmt: skip
    assert isinstance(worker, Forked)
    try:
        wait_until(lambda: "serving" in log.read_text(), what=lambda: log.read_text())
        assert worker.pid not in (os.getpid(), 0) and worker.poll() is None
        assert Path(f"/proc/{worker.pid}/cwd").resolve() == ledger.resolve()
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(timeout=60) == KILLED
    finally:
        worker.kill()


def test_a_command_with_another_module_path_is_execd(db_url: str, ledger: Path) -> None:
    env = {**cli_env(db_url, ledger), "PYTHONPATH": str(ledger)}
    process = forked_runner.spawn(["--help"], env=env, cwd=ledger, stdout=PIPE, stderr=PIPE)
    out, _ = process.communicate(timeout=120)
    assert isinstance(process, subprocess.Popen) and process.returncode == 0
    assert "Usage: runner" in out
