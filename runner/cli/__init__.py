"""The `runner` command: parses, calls the library, prints. Nothing else lives here.

Each family of commands has its module (`runs`, `follow`, `answers`, `messages`, `worker`,
`queues`, `schedules`, `limits`, `db`, `history`, `ui`; `tasks_file` reads `submit --from`);
they share the options of `options` and print through `output` (what a run looks like is
`run_output`, a tree of runs `tree_output`, what a run shows while it goes `progress`; query
results, stats, queues and schedules `report_output`), and log through `logs`. This module
builds the group, registers every command and gives each one runner's error handling: the
command modules never import this one.

It may import: `runner.core`, `runner.models`, `runner.tracing`, `runner.history`,
`runner.service`, `runner.ui` (to serve the page) and the shared leaves.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from runner.cli import (
    answers,
    db,
    follow,
    history,
    limits,
    logs,
    messages,
    output,
    queues,
    runs,
    schedules,
    ui,
    worker,
)
from runner.errors import RequestRefused, RunnerError

F = TypeVar("F", bound=Callable[..., Any])


def reports_errors(fn: F) -> F:
    """Turn runner's errors into one line on stderr and exit 1 (2 for a request that cannot
    be done as asked): never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        # An error's words may repeat what a person or a model typed (who answered, a
        # provider's message): control characters are printed escaped, as `show` does.
        except RequestRefused as exc:
            raise click.UsageError(output.printable(str(exc))) from None
        except RunnerError as exc:
            raise click.ClickException(output.printable(str(exc))) from None
        except ValueError as exc:
            raise click.UsageError(output.printable(str(exc))) from None
        except Exception as exc:
            if not _is_database_error(exc):
                raise
            from runner.service.database import failure_message, resolve_url

            url = resolve_url(kwargs.get("url"))
            raise click.ClickException(failure_message(url, exc)) from None

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
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS),
    default="text",
    envvar="RUNNER_LOG_FORMAT",
    show_default=True,
    help="How log lines on stderr look: text, or one JSON object per line (RUNNER_LOG_FORMAT).",
)
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS),
    default="info",
    envvar="RUNNER_LOG_LEVEL",
    show_default=True,
    help="The least severe log records shown (RUNNER_LOG_LEVEL).",
)
def main(log_format: str, log_level: str) -> None:
    """runner: durable, resumable LLM agent loops with named stop reasons."""
    logs.configure(log_format, log_level)


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
    runs.fork,
    runs.replay,
    runs.show,
    follow.tail,
    runs.list_,
    runs.cancel,
    answers.approve,
    answers.deny,
    answers.reply,
    messages.send,
    worker.worker,
    queues.queue,
    schedules.schedule,
    limits.limit,
    db.db,
    history.sql,
    history.stats,
    history.export,
    history.prune,
    ui.ui,
):
    main.add_command(_reporting_errors(_command))
