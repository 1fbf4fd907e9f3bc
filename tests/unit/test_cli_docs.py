"""docs/cli.md is the CLI reference, made from the commands themselves: every command and
option with its help, as `runner COMMAND --help` prints it. This test fails when the page
and the commands disagree; `RUNNER_WRITE_DOCS=1 pytest tests/unit/test_cli_docs.py` writes
the page anew."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

from runner.cli import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

HEADER = """# The `runner` command

Every command with its options, as `runner COMMAND --help` prints them. This page is made
from the commands themselves (`tests/unit/test_cli_docs.py` fails when they disagree, and
`RUNNER_WRITE_DOCS=1 .venv/bin/python -m pytest tests/unit/test_cli_docs.py` writes it anew).
[Commands at a glance](reference/commands.md) says what each is for.
"""


def _commands(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, (*path, name))


def _help(path: tuple[str, ...]) -> str:
    """`runner PATH --help`, run in this process, as a terminal 80 columns wide shows it."""
    done = CliRunner().invoke(main, [*path, "--help"], prog_name="runner", env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    return done.output


def reference() -> str:
    parts = [HEADER]
    for path, _ in _commands(main):
        title = " ".join(("runner", *path))
        parts.append(f"\n## `{title}`\n\n```\n{_help(path).rstrip()}\n```\n")
    return "".join(parts)


def test_the_cli_reference_is_the_commands_own_help() -> None:
    made = reference()
    if os.environ.get("RUNNER_WRITE_DOCS") == "1":
        PAGE.write_text(made)
    assert PAGE.read_text() == made, (
        "docs/cli.md differs from the commands' help: write it anew with "
        "RUNNER_WRITE_DOCS=1 .venv/bin/python -m pytest tests/unit/test_cli_docs.py"
    )


def test_the_reference_names_every_command() -> None:
    made = reference()
    for path, _ in _commands(main):
        assert f"## `{' '.join(('runner', *path))}`" in made
    assert "## `runner queue set`" in made  # the walk reaches subcommands
