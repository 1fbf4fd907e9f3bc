"""The `runner` command: parses, calls the library, prints. Nothing else lives here.

Each family of commands has its module (`runs`, `follow`, `answers`, `messages`, `worker`,
`queues`, `releases`, `schedules`, `limits`, `scores`, `keys`, `db`, `history`, `ui`, `mcp`;
`tasks_file`
reads `submit --from`);
they share the options of `options` and print through `output` (what a run looks like is
`run_output`, a tree of runs `tree_output`, what a run shows while it goes `progress`; query
results, stats, queues and schedules `report_output`), and log through `logs`. This module
builds the group (`group`: each command imported when it is asked for, not before), names
every command and gives each one runner's error handling: the command modules never import
this one.

It may import: `runner.core`, `runner.models`, `runner.tracing`, `runner.history`,
`runner.service`, `runner.ui` (to serve the page), `runner.mcp` (to serve MCP) and the
shared leaves.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from runner.cli import logs
from runner.cli.group import CommandGroup, Lazy, LazyCommands
from runner.errors import RequestRefused, RunnerError

F = TypeVar("F", bound=Callable[..., Any])


def reports_errors(fn: F) -> F:
    """Turn runner's errors into one line on stderr and exit 1 (2 for a request that cannot
    be done as asked): never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # `output` on the way out only: `runner --help` runs no command.
        from runner.cli.output import printable

        try:
            return fn(*args, **kwargs)
        # An error's words may repeat what a person or a model typed (who answered, a
        # provider's message): control characters are printed escaped, as `show` does.
        except RequestRefused as exc:
            raise click.UsageError(printable(str(exc))) from None
        except RunnerError as exc:
            raise click.ClickException(printable(str(exc))) from None
        except ValueError as exc:
            raise click.UsageError(printable(str(exc))) from None
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


# Every command: its module, attribute and the first paragraph of its help (what
# `runner --help` shows), imported only when asked for (runner.cli.group says why);
# tests/unit/test_lazy_commands.py fails when a summary here drifts from the command's help.
COMMANDS = {
    "run": Lazy(
        "runner.cli.runs", "run", "Run AGENT (module:attr or file.py:attr) on TASK until it stops."
    ),
    "submit": Lazy(
        "runner.cli.runs",
        "submit",
        "Queue AGENT on TASK for a worker and print the run id; or, with --from, a run per "
        "line of a file, all checked before any is submitted.",
    ),
    "resume": Lazy(
        "runner.cli.runs",
        "resume",
        "Continue run ID where its journal ends (ID may be a unique prefix).",
    ),
    "fork": Lazy(
        "runner.cli.runs",
        "fork",
        "Start a new run from the first N steps of run ID, then run it to its stop.",
    ),
    "replay": Lazy(
        "runner.cli.runs",
        "replay",
        "Check run ID against the agent's code today: no model called, no tool run.",
    ),
    "show": Lazy(
        "runner.cli.runs",
        "show",
        "Show run ID: its status, counters and transcript (observations cut unless --full), "
        "and its parent and children when it belongs to a tree of runs.",
    ),
    "tail": Lazy(
        "runner.cli.follow",
        "tail",
        "Print run ID's journal entries after position N, as `runner show` prints them, then "
        "how the run stands (its stop line); with --follow, each new entry as it is committed, "
        "from any process, until the run stops or waits for a person.",
    ),
    "list": Lazy(
        "runner.cli.runs",
        "list_",
        "List runs, newest first, with their state (stalled: running, but nobody holds it; "
        "`--status waiting`: what each waits for, and since when).",
    ),
    "cancel": Lazy(
        "runner.cli.runs",
        "cancel",
        "Stop run ID before its next step (at once if no worker holds it), and every run "
        "below it (its sub-agents' child runs, theirs, ...).",
    ),
    "approve": Lazy(
        "runner.cli.answers",
        "approve",
        "Approve the call run ID waits for: it runs, with its idempotency key, when the run "
        "goes on (a worker takes it, or `runner resume ID`).",
    ),
    "deny": Lazy(
        "runner.cli.answers",
        "deny",
        "Deny the call run ID waits for (or decline its question): the call never runs, the "
        "model reads the reason and decides what to do.",
    ),
    "reply": Lazy(
        "runner.cli.answers",
        "reply",
        "Reply TEXT to the question run ID asked (ask_human): the model reads it as the answer.",
    ),
    "send": Lazy(
        "runner.cli.messages",
        "send",
        "Send MESSAGE to run ID: the model reads it as a user turn before its next step.",
    ),
    "score": Lazy(
        "runner.cli.scores",
        "score",
        "Keep score NAME of run ID: VALUE, a number (1 and 0 for yes and no).",
    ),
    "worker": Lazy(
        "runner.cli.worker",
        "worker",
        "Claim queued runs (and runs whose worker died) and execute them.",
    ),
    "releases": Lazy(
        "runner.cli.releases",
        "releases",
        "List each release (of each agent) with unfinished runs: running, queued, waiting and "
        "parked, and how many of them a failed check parked.",
    ),
    "queue": Lazy(
        "runner.cli.queues",
        "queue",
        "Limits of queues: how many runs of a queue run at once, across all workers.",
    ),
    "schedule": Lazy(
        "runner.cli.schedules",
        "schedule",
        "Runs started on a cron schedule: exactly one run per tick, fired by the workers.",
    ),
    "limit": Lazy(
        "runner.cli.limits",
        "limit",
        "Provider limits: tokens and requests per minute, shared by every worker.",
    ),
    "db": Lazy("runner.cli.db", "db", "Manage the database schema."),
    "sql": Lazy("runner.cli.history", "sql", "Run one SQL statement read-only and print its rows."),
    "stats": Lazy(
        "runner.cli.history",
        "stats",
        "Print the stop-reason distribution of finished runs, per release, agent, day, "
        "schedule or root agent.",
    ),
    "export": Lazy(
        "runner.cli.history",
        "export",
        "Write runs with their journals as JSON Lines, one run per line, oldest first.",
    ),
    "prune": Lazy(
        "runner.cli.history",
        "prune",
        "Delete finished runs, with their journals, that finished before a date.",
    ),
    "keys": Lazy(
        "runner.cli.keys",
        "keys",
        "The key ring that encrypts payloads at rest: RUNNER_KEYS (or the file RUNNER_KEY_FILE "
        "names) holds `id:key` pairs, oldest first; the newest encrypts, any decrypts.",
    ),
    "mcp": Lazy("runner.cli.mcp", "mcp", "Serve runs to MCP clients (agents, IDEs)."),
    "ui": Lazy(
        "runner.cli.ui",
        "ui",
        "Serve pages of the runs, a run's transcript and the stop reasons per release, and "
        "the HTTP API under /api/.",
    ),
}


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


# Filled on use: `main.commands["show"]` imports runner.cli.runs, and nothing else.
main.commands = LazyCommands(COMMANDS, _reporting_errors)
