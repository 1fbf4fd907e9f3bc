"""The `runner` group imports a command's module only when that command is asked for, and
prints its table of commands from summaries kept beside the names (runner.cli.COMMANDS):
these tests fail when a summary drifts from the command's own help, or when the lazy group
prints, completes or dispatches anything differently from click's own eager group."""

from __future__ import annotations

import copy
import importlib

import click
import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

from runner.cli import COMMANDS, main
from runner.cli.group import Lazy, LazyCommands


def _real(lazy: Lazy) -> click.Command:
    command = getattr(importlib.import_module(lazy.module), lazy.attribute)
    assert isinstance(command, click.Command)
    return command


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_commands_own_short_help_at_every_width(name: str) -> None:
    lazy = COMMANDS[name]
    real = _real(lazy)
    assert real.name == name
    assert not real.hidden  # the table shows every command it lists
    for limit in range(0, 241):
        assert lazy.short_help(limit) == real.get_short_help_str(limit), (name, limit)


def test_every_command_of_the_command_modules_is_in_the_table() -> None:
    # Every click command of the command modules is in the table (or below a group in it).
    listed = {id(_real(lazy)) for lazy in COMMANDS.values()}
    for module in {lazy.module for lazy in COMMANDS.values()}:
        for value in vars(importlib.import_module(module)).values():
            if isinstance(value, click.Command) and value.callback is not None:
                inside = any(
                    isinstance(group, click.Group) and value in group.commands.values()
                    for group in (_real(lazy) for lazy in COMMANDS.values())
                )
                assert id(value) in listed or inside, f"{module}: {value.name} is not listed"


def _eager(*, whole: bool = True) -> click.Group:
    """click's own group with the same options and every command imported; `whole`: each
    command's summary given whole (its first sentence), as runner's table shows it, not
    cut to the width beside the names."""
    group = click.Group(
        main.name, params=main.params, help=main.help, context_settings=main.context_settings
    )
    for name in COMMANDS:
        command = main.commands[name]
        if whole:
            command = copy.copy(command)
            command.short_help = command.get_short_help_str(10_000)
        group.add_command(command, name)
    return group


@pytest.mark.parametrize("columns", ["40", "80", "123", "250"])
def test_runner_help_is_what_clicks_eager_group_prints(columns: str) -> None:
    env = {"COLUMNS": columns}
    lazy = CliRunner().invoke(main, ["--help"], prog_name="runner", env=env)
    eager = CliRunner().invoke(_eager(), ["--help"], prog_name="runner", env=env)
    assert lazy.exit_code == eager.exit_code == 0, lazy.output
    assert lazy.output == eager.output
    assert "Commands:" in lazy.output and "  worker " in lazy.output


@pytest.mark.parametrize("incomplete", ["", "s", "re", "queue", "x"])
def test_completing_a_command_name_offers_what_click_offers(incomplete: str) -> None:
    def offered(group: click.Group) -> list[tuple[str, str | None]]:
        completion = ShellComplete(group, {}, "runner", "_RUNNER_COMPLETE")
        return [(c.value, c.help) for c in completion.get_completions([], incomplete)]

    assert offered(main) == offered(_eager(whole=False))  # completion: click's 45 columns


def test_a_commands_options_complete_through_its_module() -> None:
    completion = ShellComplete(main, {}, "runner", "_RUNNER_COMPLETE")
    values = [c.value for c in completion.get_completions(["list"], "--stat")]
    assert values == ["--status"]


def test_the_mapping_imports_only_what_is_read() -> None:
    loaded: list[str] = []

    def prepare(command: click.Command) -> click.Command:
        loaded.append(command.name or "")
        return command

    commands = LazyCommands(
        {
            "db": Lazy("runner.cli.db", "db", "Manage the database schema."),
            "ui": Lazy("runner.cli.ui", "ui", "Serve pages."),
        },
        prepare,
    )
    assert sorted(commands) == ["db", "ui"] and len(commands) == 2
    assert "db" in commands and "nope" not in commands
    assert loaded == []  # names and membership import nothing
    assert commands["db"].name == "db" and commands["db"] is commands["db"]
    assert loaded == ["db"]  # imported, and prepared, once
    assert commands.summary("db") is None and commands.summary("ui") is not None
    probe = click.Command("probe")
    commands["probe"] = probe
    assert list(commands) == ["db", "ui", "probe"] and commands["probe"] is probe
    del commands["probe"], commands["ui"]
    assert list(commands) == ["db"] and loaded == ["db"]
    with pytest.raises(KeyError):
        commands["ui"]
    with pytest.raises(KeyError):
        del commands["ui"]


def test_errors_of_a_lazily_loaded_command_are_still_one_line() -> None:
    done = CliRunner().invoke(main, ["show", "--no-such-option"], prog_name="runner")
    assert done.exit_code == 2
    assert done.stderr.strip().splitlines() == [
        "Error: No such option '--no-such-option'. (see 'runner show --help')"
    ]
    unknown = CliRunner().invoke(main, ["shw"], prog_name="runner")
    assert unknown.exit_code == 2
    assert unknown.stderr.strip().splitlines() == [
        "Error: No such command 'shw'. Did you mean 'show'? (see 'runner --help')"
    ]
