"""The `runner` group: commands loaded on use, and usage errors on one line.

`runner --help` names every command with its summary, but runs none: importing every
command module to print that table (and `runner list` importing `worker`, `ui` and
`history` to run one command) cost most of the start-up (issue 28). So the group knows each
command by a table, its module, attribute and summary, and imports a module only when one of
its commands is asked for: to run, to print its own help, or to complete its arguments.
tests/unit/test_lazy_commands.py holds each summary to the command's own help.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from gettext import gettext
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


# A limit no summary's first sentence reaches: `runner --help` shows each one whole.
_WHOLE = 10_000


@dataclass(frozen=True)
class Lazy:
    """A command not yet imported: `attribute` of `module`, and the first paragraph of its
    help, which is all `runner --help` shows of it."""

    module: str
    attribute: str
    summary: str

    def short_help(self, limit: int) -> str:
        # Shortened by click's own rule, on a stand-in command of the same help: the table
        # reads as the real command's would, at any terminal width.
        return click.Command(None, help=self.summary).get_short_help_str(limit)


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, as `click.Group.commands` is, each imported on first
    reading (then `prepare`d, once); names and membership are known without any import.
    Commands added later (`add_command`) are kept as given."""

    def __init__(
        self, table: Mapping[str, Lazy], prepare: Callable[[click.Command], click.Command]
    ) -> None:
        self._table = dict(table)
        self._prepare = prepare
        self._loaded: dict[str, click.Command] = {}

    def summary(self, name: str) -> Lazy | None:
        """The table's entry for a command not loaded yet; None once it is (or if it was
        added rather than listed)."""
        return None if name in self._loaded else self._table.get(name)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            lazy = self._table[name]  # KeyError for a name the group does not have
            command = getattr(importlib.import_module(lazy.module), lazy.attribute)
            self._loaded[name] = self._prepare(command)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._table.pop(name, None)

    def __contains__(self, name: object) -> bool:
        # Mapping's own would read (so import) the command.
        return name in self._table or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from self._table
        yield from (name for name in self._loaded if name not in self._table)

    def __len__(self) -> int:
        return len(self._table.keys() | self._loaded.keys())


class OneLineErrors(click.Group):
    """A group whose usage errors are one line on stderr, like every other error of runner.

    Click prints a usage error after the command's usage and a hint (three lines and a
    blank one); the issue wants every error as one line, so the hint joins the message.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None


def _one_line(exc: click.UsageError) -> click.UsageError:
    if exc.ctx is None or isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
        return exc  # already one line, or `runner` alone, which prints the help
    return click.UsageError(f"{exc.format_message()} (see '{exc.ctx.command_path} --help')")


class CommandGroup(OneLineErrors):
    """The top group: its `commands` a LazyCommands. Its help and the completion of a
    command's name read the table; what click does with one command (run it, its help, its
    options' completion) reads the mapping, which imports that command's module alone."""

    commands: MutableMapping[str, click.Command]

    def _short_help(self, ctx: click.Context, name: str, limit: int) -> str | None:
        """`name`'s line in the table of commands; None if it is hidden (or unknown)."""
        lazy = self.commands.summary(name) if isinstance(self.commands, LazyCommands) else None
        if lazy is not None:
            return lazy.short_help(limit)
        command = self.get_command(ctx, name)
        return None if command is None or command.hidden else command.get_short_help_str(limit)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click.Group.format_commands, reading summaries from the table: the same rows.
        shown = [
            name for name in self.list_commands(ctx) if self._short_help(ctx, name, 0) is not None
        ]
        if not shown:
            return
        # Each summary's first sentence whole, wrapped in its column: click's rule cut it to
        # the width left beside the names, mid-sentence ("Approve the call run ID waits
        # for: it runs, with its...").
        rows = [(name, self._short_help(ctx, name, _WHOLE) or "") for name in shown]
        with formatter.section(gettext("Commands")):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        # click.Group.shell_complete without importing every command to offer its name.
        from click.shell_completion import CompletionItem

        results = []
        for name in self.list_commands(ctx):
            if name.startswith(incomplete):
                summary = self._short_help(ctx, name, 45)  # click's default limit
                if summary is not None:
                    results.append(CompletionItem(name, help=summary))
        results.extend(click.Command.shell_complete(self, ctx, incomplete))
        return results
