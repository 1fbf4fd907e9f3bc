"""The commands of one run: `runner run`, `submit`, `resume`, `fork`, `replay`, `show`,
`list`, `cancel`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import IO, TYPE_CHECKING, Any

import click

from runner.cli import output, run_output, tree_output
from runner.cli.options import (
    DURATION,
    RUN_ID,
    budget_options,
    db_option,
    given,
    json_option,
    placement_options,
)
from runner.cli.progress import Progress
from runner.core.result import AgentResult
from runner.core.status import STATES, RunStatus
from runner.core.stop_reasons import StopReason
from runner.defaults import DEFAULT_MAX_RESUMES
from runner.service import documents
from runner.tracing.environment import traces_from_environment

if TYPE_CHECKING:
    from runner.core.journal import Entry
    from runner.service.runner import Runner

EXIT_FINAL = 0
EXIT_ERROR = 1
EXIT_STOPPED = 3  # the run stopped for a reason other than a final answer
EXIT_WAITING = 4  # the run waits for a person's answer (`runner approve/deny/reply`)
EXIT_DIFFERS = 5  # `runner replay`: the agent would now act differently
EXIT_INTERRUPTED = 130  # Ctrl-C: the run was released, unfinished (128 + SIGINT)


def _runner(
    url: str | None,
    observer: Callable[[str, Entry], None] | None = None,
    *,
    max_resumes: int | None = None,
) -> Runner:
    # Imported here: the durable runner loads SQLAlchemy, which `runner --help` does without.
    from runner.service.runner import DEFAULT_MAX_RESUMES, Runner

    chosen = DEFAULT_MAX_RESUMES if max_resumes is None else max_resumes
    return Runner(url, observer=observer, max_resumes=chosen)


def finish(result: AgentResult, as_json: bool, seconds: float | None = None) -> None:
    if as_json:
        output.print_json(documents.run_json(result))
    elif result.status is RunStatus.WAITING:
        run_output.waiting(result)
    else:
        run_output.stopped(result, seconds)
        _hint_revival(result)
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


def _progress(as_json: bool) -> Progress | None:
    return None if as_json else Progress()


def _go(run_id: str, progress: Progress | None, work: Callable[[], AgentResult]) -> AgentResult:
    """Run `work` with the live progress on; Ctrl-C exits 130, the run released by the
    library (Runner.execute) and resumable at once."""
    try:
        if progress is None:
            return work()
        with progress:
            return work()
    except KeyboardInterrupt:
        output.line(
            f"interrupted: run {run_id} was released unfinished; continue it with "
            f"`runner resume {run_id}`",
            err=True,
        )
        sys.exit(EXIT_INTERRUPTED)


@click.command()
@click.argument("agent")
@click.argument("task")
@budget_options
@click.option(
    "--id",
    "run_id",
    default=None,
    help="Choose the run id. One that exists returns (or resumes) that run if the agent, task "
    "and budgets are the same, and is refused (exit 2) if not.",
)
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
    `runner resume ID`. On a terminal the step in flight is shown live; Ctrl-C releases the
    run and exits 130. Exit code 0 for a final answer, 3 for any other stop, 4 when the
    run waits for a person's answer (it prints the command that gives it).
    """
    progress = _progress(as_json)
    with traces_from_environment(), _runner(url, observer=progress) as runner:
        # Not announced to idle workers: this process runs it, now.
        chosen = runner.submit(agent, task, id=run_id, wake=False, **given(budgets))
        output.line(f"run {chosen}", err=True)
        result = _go(chosen, progress, lambda: runner.resume(chosen, wait=block))
    finish(result, as_json, progress.elapsed() if progress else None)


@click.command()
@click.argument("agent")
@click.argument("task", required=False)
@budget_options
@click.option(
    "--id",
    "run_id",
    default=None,
    help="Choose the run id (one that exists is kept for the same request, refused if not).",
)
@placement_options
@click.option(
    "--from",
    "source",
    type=click.File("r"),
    default=None,
    metavar="FILE",
    help="Submit one run per line of FILE (JSON objects: task, and optionally id, budgets, "
    "queue, priority, at, in; '-' reads stdin). The flags are every line's defaults.",
)
@db_option
@json_option
def submit(
    agent: str,
    task: str | None,
    run_id: str | None,
    queue: str | None,
    priority: int | None,
    start_at: datetime | None,
    start_in: timedelta | None,
    source: IO[str] | None,
    url: str | None,
    as_json: bool,
    **budgets: Any,
) -> None:
    """Queue AGENT on TASK for a worker and print the run id; or, with --from, a run per
    line of a file, all checked before any is submitted.

    --queue and --priority place it (higher first); --at or --in delay its start (on the
    database's clock). A bad line of --from is named by its number and nothing is
    submitted; the runs then go in batches of 1,000, one transaction each.
    """
    if start_at is not None and start_in is not None:
        raise click.UsageError("give --at or --in, not both")
    if (task is None) == (source is None):
        raise click.UsageError("give a TASK or --from FILE (one of them)")
    if source is not None:
        if run_id is not None:
            raise click.UsageError("--id names one run: with --from, give each line an id")
        _submit_file(agent, source, queue, priority, start_at, start_in, given(budgets), url,
                     as_json)  # fmt: skip
        return
    assert task is not None
    with _runner(url) as runner:
        chosen = runner.submit(
            agent, task, id=run_id, queue=queue, priority=priority, not_before=start_at,
            delay=start_in, **given(budgets),
        )  # fmt: skip
        row = runner.row(chosen)
    if as_json:
        output.print_json(documents.run_json(None, row))
    else:
        output.line(chosen)


def _submit_file(
    agent: str,
    source: IO[str],
    queue: str | None,
    priority: int | None,
    start_at: datetime | None,
    start_in: timedelta | None,
    budgets: dict[str, Any],
    url: str | None,
    as_json: bool,
) -> None:
    from runner.cli.tasks_file import BadLine, read_items
    from runner.errors import SubmissionRefused, SubmitInterrupted

    try:
        items, lines = read_items(
            source, queue=queue, priority=priority, start_at=start_at, start_in=start_in,
            budgets=budgets,
        )  # fmt: skip
    except BadLine as exc:
        raise click.UsageError(str(exc)) from None
    if not items:
        raise click.UsageError(f"no tasks in {source.name}: one JSON object per line")
    with _runner(url) as runner:
        try:
            done = runner.submit_many(agent, items)
        except SubmissionRefused as exc:
            raise click.UsageError(f"line {lines[exc.item - 1]}: {exc.reason}") from None
        except SubmitInterrupted as exc:
            raise click.ClickException(
                f"line {lines[exc.item - 1]}: {exc.reason}; the {len(exc.submitted)} runs of "
                "the lines before its batch were submitted, nothing from its batch on"
            ) from None
    if as_json:
        output.print_json({"submitted": done.created, "existing": done.existing, "ids": done.ids})
    else:
        existed = f" ({len(done.existing)} existed already)" if done.existing else ""
        output.line(f"submitted {output.plural(done.created, 'run')}{existed}")


@click.command()
@click.argument("run_id", metavar="ID", type=RUN_ID)
@budget_options
@click.option(
    "--max-resumes",
    type=click.IntRange(min=0),
    default=None,
    help="Takeovers in a row without progress before crash_loop (default "
    f"{DEFAULT_MAX_RESUMES}). Given for a run stopped by crash_loop, revives it.",
)
@click.option("--steal", is_flag=True, help="Take the run over even if a live worker holds it.")
@wait_option
@db_option
@json_option
def resume(
    run_id: str,
    max_resumes: int | None,
    steal: bool,
    block: bool,
    url: str | None,
    as_json: bool,
    **budgets: Any,
) -> None:
    """Continue run ID where its journal ends (ID may be a unique prefix).

    With new budgets (--max-steps 50, ...) a run that stopped for a budget, tool_errors or
    crash_loop goes on from its journal, the change and the earlier stop journaled; an
    unfinished run goes on under the new budgets. Exit codes as `runner run`: a run still
    waiting for its answer exits 4.
    """
    chosen = given(budgets)
    progress = _progress(as_json)
    with (
        traces_from_environment(),
        _runner(url, observer=progress, max_resumes=max_resumes) as runner,
    ):
        before = runner.row(run_id)
        found = before.id
        if block and not as_json:
            waiting = runner.waiting_for(found)
            if waiting is not None:
                output.line(run_output.wait_lines(waiting)[0], err=True)
        result = _go(
            found,
            progress,
            lambda: runner.resume(
                found, steal=steal, revive=max_resumes is not None, wait=block, **chosen
            ),
        )
        # A finished run that nothing revived is only shown again: say so, with no time.
        idle = before.status is RunStatus.FINISHED and (
            runner.row(found).updated_at == before.updated_at
        )
    if idle and not as_json:
        output.line(f"run {found} had already finished: nothing ran", err=True)
    finish(result, as_json, None if idle or not progress else progress.elapsed())


def _hint_revival(result: AgentResult) -> None:
    """How to continue a run that stopped for a reason new budgets can lift."""
    from runner.core.budget_changes import LIMIT_OF, REVIVABLE

    reason = result.stop_reason
    if reason is None or reason not in REVIVABLE:
        return
    limit = LIMIT_OF.get(reason)
    flag = "--max-resumes N" if limit is None else "--" + limit.replace("_", "-") + " N"
    output.line(
        f"run {result.run_id} stopped with {reason}: `runner resume {result.run_id} "
        f"{flag}` continues it",
        err=True,
    )


@click.command()
@click.argument("run_id", metavar="ID", type=RUN_ID)
@click.option(
    "--at-step",
    type=click.IntRange(min=0),
    required=True,
    help="Copy the first N steps (N must be a tool call with its result; 0: the task only).",
)
@click.option("--id", "new_id", default=None, help="Choose the fork's run id.")
@click.option("--agent", default=None, help="Run the fork with this agent (module:attr).")
@budget_options
@click.option("--queue", is_flag=True, help="Queue the fork for a worker instead of running it.")
@db_option
@json_option
def fork(
    run_id: str,
    at_step: int,
    new_id: str | None,
    agent: str | None,
    queue: bool,
    url: str | None,
    as_json: bool,
    **budgets: Any,
) -> None:
    """Start a new run from the first N steps of run ID, then run it to its stop.

    The fork's journal starts as a copy of those steps (their tool calls are not run again)
    and records where it came from (forked_from_id); run ID is not changed. The fork's own
    calls get keys of their own. Budget flags change the fork's budgets. Exit codes as for
    `runner run`.
    """
    progress = None if queue else _progress(as_json)
    with _runner(url, observer=progress) as runner:
        forked = runner.fork(run_id, at_step, id=new_id, agent=agent, **given(budgets))
        row = runner.row(forked)
        if queue:
            if as_json:
                output.print_json(documents.run_json(None, row))
            else:
                output.line(forked)
            return
        output.line(f"run {forked} (forked from {row.forked_from_id} at step {at_step})", err=True)
        result = _go(forked, progress, lambda: runner.resume(forked))
    finish(result, as_json, progress.elapsed() if progress else None)


@click.command()
@click.argument("run_id", metavar="[ID]", required=False)
@click.option(
    "--agent",
    default=None,
    help="Replay against this agent (default: the run's); with --sample, replay only the "
    "runs recorded with this agent reference.",
)
@click.option("--agent-budgets", is_flag=True, help="Use the agent's budgets instead of the run's.")
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Replay the newest N finished runs instead of one (a deploy gate).",
)
@click.option(
    "--since",
    type=DURATION,
    default=None,
    metavar="DURATION",
    help="With --sample: only runs finished this long ago or later (30m, 12h, 7d).",
)
@db_option
@json_option
def replay(
    run_id: str | None,
    agent: str | None,
    agent_budgets: bool,
    sample: int | None,
    since: timedelta | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Check run ID against the agent's code today: no model called, no tool run.

    The recorded model outputs and tool results are fed to the agent again; the first step
    where it would now act differently is reported. Exit code 0 when it agrees to the end,
    5 when it differs, 1 on errors.

    With --sample N (no ID), the newest N finished runs are replayed, each against its own
    agent's code today (--agent REF: only REF's runs): every run that differs is named with
    its step and what differed, and the exit code is 5 if any differs, the gate a CI job
    runs before a deploy (docs/guides/deploys.md).
    """
    if sample is None:
        if run_id is None:
            raise click.UsageError("give a run ID, or --sample N")
        if since is not None:
            raise click.UsageError("--since goes with --sample")
    elif run_id is not None or agent_budgets:
        raise click.UsageError("--sample replays recorded runs: give no ID nor --agent-budgets")
    if sample is not None:
        _replay_sample(sample, since, agent, url, as_json)
        return
    assert run_id is not None
    with _runner(url) as runner:
        report = runner.replay(run_id, agent=agent, agent_budgets=agent_budgets)
        shown = agent or runner.row(report.run_id).agent
    if as_json:
        output.print_json(run_output.replay_json(report, shown))
    else:
        output.line(run_output.replay_lines(report, shown))
    sys.exit(EXIT_FINAL if report.agrees else EXIT_DIFFERS)


def _replay_sample(
    count: int, since: timedelta | None, agent: str | None, url: str | None, as_json: bool
) -> None:
    with _runner(url) as runner:
        reports = runner.replay_sample(count, since=since, agent=agent)
    if as_json:
        output.print_json([run_output.replay_json(report, None) for report in reports])
    else:
        output.line(run_output.sample_lines(reports, count))
    sys.exit(EXIT_FINAL if all(report.agrees for report in reports) else EXIT_DIFFERS)


@click.command()
@click.argument("run_id", metavar="ID")
@click.option("--full", is_flag=True, help="Show every observation and argument whole.")
@click.option(
    "--tree",
    "as_tree",
    is_flag=True,
    help="Draw the tree of runs ID is in (its root, sub-agents, theirs) instead.",
)
@db_option
@json_option
def show(run_id: str, full: bool, as_tree: bool, url: str | None, as_json: bool) -> None:
    """Show run ID: its status, counters and transcript (observations cut unless --full),
    and its parent and children when it belongs to a tree of runs.

    --tree draws the whole tree from its root instead: each run's state, stop reason and
    own spend, and the tree's total."""
    from runner.service.overview import shown
    from runner.service.values import stall_reason

    run = shown(url, run_id)
    if as_tree:
        if as_json:
            output.print_json(tree_output.tree_json(run.tree))
        else:
            output.line(tree_output.tree_text(run.tree, focus=run.row.id))
    elif as_json:
        document = documents.run_json(run.result, run.row, transcript=True)
        node = run.tree.find(run.row.id)
        document["children"] = [child.row.id for child in node.children] if node else []
        document["scores"] = [run_output.score_json(score) for score in run.scores]
        output.print_json(document)
    else:
        stalled = stall_reason(run.row, run.now)
        page = run_output.render_run(
            run.result, run.row, run.journal, run.now, full=full, stalled=stalled,
            family=tree_output.family_lines(run.tree, run.row),
            scores=run.scores,
        )  # fmt: skip
        output.line(page)


@click.command(name="list")
@click.option(
    "--status",
    type=click.Choice(STATES),
    default=None,
    help="Only runs in this state (running leaves out the stalled ones).",
)
@click.option(
    "--stop-reason",
    type=click.Choice([r.value for r in StopReason]),
    default=None,
    help="Only runs that stopped for this reason.",
)
@click.option("--release", default=None, help="Only runs of this release.")
@click.option("--schedule", default=None, metavar="NAME", help="Only runs this schedule started.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Most runs listed."
)
@click.option(
    "--tree",
    "as_tree",
    is_flag=True,
    help="Draw the tree of runs each listed run is in (sub-agents), each tree once.",
)
@db_option
@json_option
def list_(
    status: str | None,
    stop_reason: str | None,
    release: str | None,
    schedule: str | None,
    limit: int,
    as_tree: bool,
    url: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first, with their state (stalled: running, but nobody holds it;
    `--status waiting`: what each waits for, and since when).

    --tree draws, for the runs listed, the trees of runs they are in (a root and its
    sub-agents' child runs), newest first: each run's state, stop reason and own spend."""
    # Imported here: `runner --help` loads no database code. It reads without SQLAlchemy.
    from runner.service.overview import listed

    reason = StopReason(stop_reason) if stop_reason else None
    # One more than shown: whether there are more is worth a line, not a second query.
    found = listed(
        url, state=status, stop_reason=reason, release=release, limit=limit + 1,
        schedule=schedule, trees=as_tree,
    )  # fmt: skip
    rows, more = found.rows[:limit], len(found.rows) > limit
    if as_tree:
        roots = {row.root_id or row.id for row in rows}
        trees = [tree for tree in found.trees if (tree.row.root_id or tree.row.id) in roots]
        if as_json:
            output.print_json([tree_output.tree_json(tree) for tree in trees])
        else:
            output.line(tree_output.trees_text(trees))
    elif as_json:
        output.print_json(
            [documents.run_json(None, row, wait=found.waits.get(row.id)) for row in rows]
        )
        return
    elif status == RunStatus.WAITING:
        output.line(run_output.waits_table(rows, found.waits))
    else:
        output.line(run_output.runs_table(rows, found.now))
    if more:
        said = f"showing the {limit} newest runs; there are more (--limit N shows N)"
        output.line(said, err=True)


@click.command()
@click.argument("run_id", metavar="ID", type=RUN_ID)
@db_option
def cancel(run_id: str, url: str | None) -> None:
    """Stop run ID before its next step (at once if no worker holds it), and every run
    below it (its sub-agents' child runs, theirs, ...)."""
    with _runner(url) as runner:
        result = runner.cancel(run_id)
    if result.status is RunStatus.FINISHED:
        # A waiting run holds no worker: it is finished `cancelled` at once.
        output.line(f"run {result.run_id} is finished: {result.stop_reason}")
    else:
        output.line(f"run {result.run_id}: cancel requested; it stops before its next step")
