"""What the commands print through a pipe or click's CliRunner: whole lines, no escape codes,
however narrow the terminal is said to be and whatever asks for colour."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from runner.cli import main

RUNNER = Path(sys.executable).parent / "runner"
# Two cells as wide as `runner sql` shows them (60), wider together than any terminal here.
A, B = "a" * 60, "b" * 60
QUERY = f"SELECT '{A}' AS a, '{B}' AS b, 1 AS n"
LINES = [f"a{' ' * 61}b{' ' * 61}n", f"{A}  {B}  1", "(1 row)"]


def test_a_pipe_gets_whole_lines_and_no_escape_codes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runner.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    env.update(COLUMNS="40", TERM="xterm-256color")
    for args in (["db", "upgrade"], ["sql", QUERY]):
        done = subprocess.run(
            [str(RUNNER), *args, "--db", url], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == LINES


def test_cli_runner_output_has_no_escape_codes_even_when_colour_is_forced(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runner.db'}"
    env = {"FORCE_COLOR": "1", "NO_COLOR": None, "COLUMNS": "40"}
    cli = CliRunner()
    assert cli.invoke(main, ["db", "upgrade", "--db", url], env=env).exit_code == 0
    shown = cli.invoke(main, ["sql", QUERY, "--db", url], env=env)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == LINES
    for args in (["list"], ["stats"]):
        assert "\x1b" not in cli.invoke(main, [*args, "--db", url], env=env).output
