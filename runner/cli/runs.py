"""The commands of one run: `runner run`, `submit`, `resume`, `show`, `list`, `cancel`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from runner.budgets import StopReason
from runner.cli import output
from runner.cli.options import budget_options, db_option, given, json_option
from runner.result import AgentResult
from runner.status import RunStatus

if TYPE_CHECKING:
    from runner.durable import Runner
    from runner.journal import Entry

EXIT_FINAL = 0
EXIT_ERROR = 1
EXIT_STOPPED = 3  # the run stopped for a reason other than a final answer
EXIT_WAITING = 4  # the run waits for a person's answer (`runner approve/deny/reply`)


def _runner(url: str | None, observer: Callable[[str, Entry], None] | None = None) -> Runner:
    # Imported here: the durable runner loads SQLAlchemy, which `runner --help` does without.
    from runner.durable import Runner

    return Runner(url, observer=observer)


def finish(result: AgentResult, as_json: bool) -> None:
    if as_json:
        output.print_json(output.run_json(result))
    elif result.status is RunStatus.WAITING:
        output.waiting(result)
    else:
        output.stopped(result)
    if result.status is RunStatus.WAITING:
        sys.exit(EXIT_WAITING)
    sys.exit(EXIT_FINAL if result.stop_reason == StopReason.FINAL else EXIT_STOPPED)


def wait_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--wait",
        "block",
        is_flag=True,
        help="At a call that needs a person's answer, block until it comes and go on "
        "(instead of exiting 4).",
    )(fn)


@click.command()
@click.argument("agent")
@click.argument("task")
@budget_options
@click.option("--id", "run_id", default=None, help="Choose the run id (an existing one resumes).")
@wait_option
@db_option
@json_option
def run(
    agent: str,
    task: str,
    run_id: str | None,
    block: bool,
    url: str | None,
    as_json: bool,
    **budgets: Any,
) -> None:
    """Run AGENT (module:attr or file.py:attr) on TASK until it stops.

    The run id goes to stderr before the first step: if the process dies, continue with
    `runner resume ID`. Exit code 0 for a final answer, 3 for any other stop, 4 when the
    run waits for a person's answer (it prints the command that gives it).
    """
    with _runner(url, observer=None if as_json else output.progress) as runner:
        # Not announced to idle workers: this process runs it, now.
        chosen = runner.submit(agent, task, id=run_id, wake=False, **given(budgets))
        output.line(f"run {chosen}", err=True)
        result = runner.resume(chosen, wait=block)
    finish(result, as_json)


@click.command()
@click.argument("agent")
@click.argument("task")
@budget_options
@click.option("--id", "run_id", default=None, help="Choose the run id (an existing one is kept).")
@db_option
@json_option
def submit(
    agent: str, task: str, run_id: str | None, url: str | None, as_json: bool, **budgets: Any
) -> None:
    """Queue AGENT on TASK for a worker and print the run id."""
    with _runner(url) as runner:
        chosen = runner.submit(agent, task, id=run_id, **given(budgets))
        row = runner.row(chosen)
    if as_json:
        output.print_json(output.run_json(None, row))
    else:
        output.line(chosen)


@click.command()
@click.argument("run_id", metavar="ID")
@click.option("--steal", is_flag=True, help="Take the run over even if a live worker holds it.")
@wait_option
@db_option
@json_option
def resume(run_id: str, steal: bool, block: bool, url: str | None, as_json: bool) -> None:
    """Continue run ID where its journal ends (ID may be a unique prefix).

    Exit codes as `runner run`: a run still waiting for its answer exits 4.
    """
    with _runner(url, observer=None if as_json else output.progress) as runner:
        if block and not as_json:
            waiting = runner.waiting_for(run_id)
            if waiting is not None:
                output.line(output.wait_lines(waiting)[0], err=True)
        result = runner.resume(run_id, steal=steal, wait=block)
    finish(result, as_json)


@click.command()
@click.argument("run_id", metavar="ID")
@db_option
@json_option
def show(run_id: str, url: str | None, as_json: bool) -> None:
    """Show run ID: its status, counters and transcript."""
    with _runner(url) as runner:
        result = runner.get(run_id)
        row = runner.row(run_id)
    if as_json:
        output.print_json(output.run_json(result, row, transcript=True))
    else:
        output.line(output.render_run(result, row))


@click.command(name="list")
@click.option(
    "--status",
    type=click.Choice([s.value for s in RunStatus]),
    default=None,
    help="Only runs with this status.",
)
@click.option(
    "--stop-reason",
    type=click.Choice([r.value for r in StopReason]),
    default=None,
    help="Only runs that stopped for this reason.",
)
@click.option("--release", default=None, help="Only runs of this release.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Most runs listed."
)
@db_option
@json_option
def list_(
    status: str | None,
    stop_reason: str | None,
    release: str | None,
    limit: int,
    url: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first (`--status waiting`: what each waits for, and since when)."""
    with _runner(url) as runner:
        rows = runner.list(
            status=RunStatus(status) if status else None,
            stop_reason=StopReason(stop_reason) if stop_reason else None,
            release=release,
            limit=limit,
        )
        waits = runner.waits(rows)
    if as_json:
        output.print_json([output.run_json(None, row, wait=waits.get(row.id)) for row in rows])
    elif status == RunStatus.WAITING:
        output.line(output.waits_table(rows, waits))
    else:
        output.line(output.runs_table(rows))


@click.command()
@click.argument("run_id", metavar="ID")
@db_option
def cancel(run_id: str, url: str | None) -> None:
    """Stop run ID before its next step (at once if no worker holds it)."""
    with _runner(url) as runner:
        result = runner.cancel(run_id)
    if result.status is RunStatus.FINISHED:
        # A waiting run holds no worker: it is finished `cancelled` at once.
        output.line(f"run {result.run_id} is finished: {result.stop_reason}")
    else:
        output.line(f"run {result.run_id}: cancel requested; it stops before its next step")
