"""The `runner` command: parses, calls the library, prints. Nothing else lives here.

Each family of commands has its module (runs, answers, worker, db, history); they share the options
of `runner.cli.options` and print through `runner.cli.output`. This module builds the
group, registers every command and gives each one runner's error handling: the command
modules never import this one.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from runner.cli import answers, db, history, runs, worker
from runner.errors import RunnerError

F = TypeVar("F", bound=Callable[..., Any])


def reports_errors(fn: F) -> F:
    """Turn runner's errors into one line on stderr and exit 1: never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RunnerError as exc:
            raise click.ClickException(str(exc)) from None
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        except Exception as exc:
            if not _is_database_error(exc):
                raise
            from runner.database import resolve_url, safe_url

            url = safe_url(resolve_url(kwargs.get("url")))
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise click.ClickException(
                f"database error on {url}: {detail[0] if detail else type(exc).__name__}"
            ) from None

    return wrapper  # type: ignore[return-value]


def _is_database_error(exc: Exception) -> bool:
    # SQLAlchemy is loaded by the commands that use a database, never by `runner --help`:
    # if it is not loaded, this error cannot be one of its own.
    errors = sys.modules.get("sqlalchemy.exc")
    return errors is not None and isinstance(exc, errors.SQLAlchemyError)


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


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="durable-runner", prog_name="runner")
def main() -> None:
    """runner: durable, resumable LLM agent loops with named stop reasons."""


def _reporting_errors(command: click.Command) -> click.Command:
    """The command (and a group's subcommands) with its callback wrapped in reports_errors."""
    if command.callback is not None:
        command.callback = reports_errors(command.callback)
    if isinstance(command, click.Group):
        for subcommand in command.commands.values():
            _reporting_errors(subcommand)
    return command


for _command in (
    runs.run,
    runs.submit,
    runs.resume,
    runs.show,
    runs.list_,
    runs.cancel,
    answers.approve,
    answers.deny,
    answers.reply,
    worker.worker,
    db.db,
    history.sql,
    history.stats,
    history.export,
    history.prune,
):
    main.add_command(_reporting_errors(_command))
