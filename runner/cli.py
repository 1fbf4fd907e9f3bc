"""The `runner` command: parses, calls the library, prints. Nothing else lives here."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from sqlalchemy.exc import SQLAlchemyError

from runner.budgets import StopReason
from runner.database import URL_VARIABLE, open_engine, resolve_url, safe_url, upgrade
from runner.durable import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_RESUMES, Runner
from runner.errors import RunnerError
from runner.journal import Entry, EntryKind
from runner.render import render_run, run_json, runs_table
from runner.result import AgentResult
from runner.status import RunStatus
from runner.worker import Worker, start_worker

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FINAL = 0
EXIT_ERROR = 1
EXIT_STOPPED = 3  # the run stopped for a reason other than a final answer


def db_option(fn: F) -> F:
    return click.option(
        "--db",
        "url",
        envvar=URL_VARIABLE,
        default=None,
        metavar="URL",
        help=f"Database URL (default: ${URL_VARIABLE}, else sqlite:///runner.db).",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def budget_options(fn: F) -> F:
    whole = click.IntRange(min=0)
    amount = click.FloatRange(min=0)
    for flag, kind, text in reversed(
        [
            ("--max-steps", whole, "Most steps (model calls) the run may take."),
            ("--max-tokens", whole, "Most tokens the run may spend."),
            ("--max-consecutive-errors", whole, "Most failed steps in a row."),
            ("--max-repeats", whole, "Most times one identical tool call may be made."),
            ("--max-seconds", amount, "Wall-clock budget of the run."),
            ("--max-cost", amount, "Most cost the run may spend."),
        ]
    ):
        fn = click.option(flag, type=kind, default=None, help=text + " Default: the agent's.")(fn)
    return fn


def given(budgets: dict[str, Any]) -> dict[str, Any]:
    """The budget flags the user set: the others keep the agent's own budgets."""
    return {name: value for name, value in budgets.items() if value is not None}


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
        except SQLAlchemyError as exc:
            url = safe_url(resolve_url(kwargs.get("url")))
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise click.ClickException(
                f"database error on {url}: {detail[0] if detail else type(exc).__name__}"
            ) from None

    return wrapper  # type: ignore[return-value]


def progress(run_id: str, entry: Entry) -> None:
    """One line per step on stderr: the answer alone goes to stdout."""
    c = entry.counters
    if entry.kind is EntryKind.OBSERVATION:
        status = "error" if entry.is_error else "ok"
        line = f"step {entry.step}  tool {entry.tool}  {status}  tokens {c.tokens}"
    elif entry.kind is EntryKind.FINAL:
        line = f"step {entry.step}  final  tokens {c.tokens}"
    elif entry.kind is EntryKind.REFUSED:
        line = f"step {entry.step}  {entry.action_type} refused by a budget  tokens {c.tokens}"
    else:
        return
    click.echo(line, err=True)


def finish(result: AgentResult, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(run_json(result), default=str))
    else:
        click.echo(
            f"stopped: {result.stop_reason} after {result.steps} steps, "
            f"{result.tokens} tokens (run {result.run_id})",
            err=True,
        )
        if result.output is not None:
            click.echo(
                result.output if isinstance(result.output, str) else json.dumps(result.output)
            )
    sys.exit(EXIT_FINAL if result.stop_reason == StopReason.FINAL else EXIT_STOPPED)


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


@main.command()
@click.argument("agent")
@click.argument("task")
@budget_options
@click.option("--id", "run_id", default=None, help="Choose the run id (an existing one resumes).")
@db_option
@json_option
@reports_errors
def run(
    agent: str, task: str, run_id: str | None, url: str | None, as_json: bool, **budgets: Any
) -> None:
    """Run AGENT (module:attr or file.py:attr) on TASK until it stops.

    The run id goes to stderr before the first step: if the process dies, continue with
    `runner resume ID`. Exit code 0 for a final answer, 3 for any other stop.
    """
    with Runner(url, observer=None if as_json else progress) as runner:
        chosen = runner.submit(agent, task, id=run_id, **given(budgets))
        click.echo(f"run {chosen}", err=True)
        result = runner.resume(chosen)
    finish(result, as_json)


@main.command()
@click.argument("agent")
@click.argument("task")
@budget_options
@click.option("--id", "run_id", default=None, help="Choose the run id (an existing one is kept).")
@db_option
@json_option
@reports_errors
def submit(
    agent: str, task: str, run_id: str | None, url: str | None, as_json: bool, **budgets: Any
) -> None:
    """Queue AGENT on TASK for a worker and print the run id."""
    with Runner(url) as runner:
        chosen = runner.submit(agent, task, id=run_id, **given(budgets))
        row = runner.row(chosen)
    if as_json:
        click.echo(json.dumps(run_json(None, row), default=str))
    else:
        click.echo(chosen)


@main.command()
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs executed at once in this process.",
)
@click.option("--once", is_flag=True, help="Drain what is runnable now, then exit.")
@click.option(
    "--poll",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between looks at an empty queue.",
)
@click.option(
    "--lease",
    "lease_seconds",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_LEASE_SECONDS,
    show_default=True,
    help="Lease length in seconds; a heartbeat renews it.",
)
@click.option(
    "--max-resumes",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_RESUMES,
    show_default=True,
    help="Takeovers in a row without progress before a run stops with crash_loop.",
)
@db_option
@reports_errors
def worker(
    concurrency: int,
    once: bool,
    poll: float,
    lease_seconds: float,
    max_resumes: int,
    url: str | None,
) -> None:
    """Claim queued runs (and runs whose worker died) and execute them.

    SIGTERM or SIGINT: finish the steps in flight, release the runs, exit 0. A second
    signal exits at once and leaves the runs to lease expiry.
    """
    serving = start_worker(
        lambda: Worker(
            url,
            concurrency=concurrency,
            poll=poll,
            lease_seconds=lease_seconds,
            max_resumes=max_resumes,
            once=once,
            log=log_line,
        ),
        log=log_line,
        wait=not once,
    )
    serving.install_signal_handlers()
    serving.serve()


def log_line(line: str) -> None:
    click.echo(line, err=True)


@main.command()
@click.argument("run_id", metavar="ID")
@click.option("--steal", is_flag=True, help="Take the run over even if a live worker holds it.")
@db_option
@json_option
@reports_errors
def resume(run_id: str, steal: bool, url: str | None, as_json: bool) -> None:
    """Continue run ID where its journal ends (ID may be a unique prefix)."""
    with Runner(url, observer=None if as_json else progress) as runner:
        result = runner.resume(run_id, steal=steal)
    finish(result, as_json)


@main.command()
@click.argument("run_id", metavar="ID")
@db_option
@json_option
@reports_errors
def show(run_id: str, url: str | None, as_json: bool) -> None:
    """Show run ID: its status, counters and transcript."""
    with Runner(url) as runner:
        result = runner.get(run_id)
        row = runner.row(run_id)
    if as_json:
        click.echo(json.dumps(run_json(result, row, transcript=True), default=str))
    else:
        click.echo(render_run(result, row))


@main.command(name="list")
@click.option("--status", type=click.Choice(["queued", "running", "finished"]), default=None)
@click.option("--stop-reason", type=click.Choice([r.value for r in StopReason]), default=None)
@click.option("--release", default=None, help="Only runs of this release.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@db_option
@json_option
@reports_errors
def list_(
    status: str | None,
    stop_reason: str | None,
    release: str | None,
    limit: int,
    url: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first."""
    with Runner(url) as runner:
        rows = runner.list(
            status=RunStatus(status) if status else None,
            stop_reason=StopReason(stop_reason) if stop_reason else None,
            release=release,
            limit=limit,
        )
    if as_json:
        click.echo(json.dumps([run_json(None, row) for row in rows], default=str))
    else:
        click.echo(runs_table(rows))


@main.command()
@click.argument("run_id", metavar="ID")
@db_option
@reports_errors
def cancel(run_id: str, url: str | None) -> None:
    """Stop run ID before its next step (at once if no worker holds it)."""
    with Runner(url) as runner:
        result = runner.cancel(run_id)
    if result.status == "finished":
        click.echo(f"run {result.run_id} is finished: {result.stop_reason}")
    else:
        click.echo(f"run {result.run_id}: cancel requested; it stops before its next step")


@main.group()
def db() -> None:
    """Manage the database schema."""


@db.command(name="upgrade")
@db_option
@reports_errors
def db_upgrade(url: str | None) -> None:
    """Apply runner's migrations up to the latest revision."""
    engine = open_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    click.echo(f"{safe_url(engine.url)} is at the latest schema revision")


# The history commands live in their own module; they use the options defined above.
from runner.cli_history import export, prune, sql, stats  # noqa: E402

for _command in (sql, stats, export, prune):
    main.add_command(_command)
