"""`runner worker`: the command that serves the queue (the worker itself is runner.worker)."""

from __future__ import annotations

import atexit
import gc

import click

from runner.cli.options import db_option
from runner.defaults import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_RESUMES
from runner.tracing.environment import traces_from_environment

# How many times fewer full passes of the collector a serving worker makes (see `worker`).
FULL_PASS_SPACING = 10


@click.command()
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs executed at once in this process.",
)
@click.option(
    "--once",
    is_flag=True,
    help="Drain what is runnable now, then exit; the runs it starts are finished first (one "
    "parked by a provider limit is waited for, paced to the limit).",
)
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
@click.option(
    "--queue",
    "queue_names",
    default=None,
    metavar="A,B",
    help="Claim only from these queues, comma-separated (default: every queue).",
)
@click.option(
    "--connections",
    type=click.IntRange(min=1),
    default=None,
    help="At most this many database connections (default: sized from --concurrency and "
    "what the database can spare; said at start).",
)
@click.option(
    "--release",
    default=None,
    envvar="RUNNER_RELEASE",
    help="The release this worker runs every run with (RUNNER_RELEASE; default: each "
    "agent's own, Agent(release=...)): queues compare it with a run's (--older-releases).",
)
@click.option(
    "--drain",
    is_flag=True,
    help="Take only the runs of --release, then exit when none of them is left queued, "
    "parked or running (for the workers of an old release, after a deploy).",
)
@db_option
def worker(
    concurrency: int,
    once: bool,
    poll: float,
    lease_seconds: float,
    max_resumes: int,
    queue_names: str | None,
    connections: int | None,
    release: str | None,
    drain: bool,
    url: str | None,
) -> None:
    """Claim queued runs (and runs whose worker died) and execute them.

    Logs one line per event on stderr, with a UTC timestamp and the run's id
    (`runner --log-format json worker` for JSON lines).

    A database that is away is waited for; one that refuses the URL for good (no such
    role or database, a bad password) is an error at once.

    SIGTERM or SIGINT: finish the steps in flight, release the runs, exit 0 (also while
    waiting for the database). A second signal exits at once and leaves the runs to lease
    expiry.

    A worker's release is --release, else RUNNER_RELEASE, else the release each agent's
    code declares (Agent(release=...)).
    """
    if drain and not release:
        raise click.UsageError("--drain serves one release: give --release (or RUNNER_RELEASE)")
    # Imported here: the worker loads SQLAlchemy, which `runner --help` does without.
    from runner.service.worker import Worker
    from runner.service.worker_process import start_worker

    served = None if queue_names is None else [name.strip() for name in queue_names.split(",")]

    serving = start_worker(
        lambda: Worker(
            url,
            concurrency=concurrency,
            poll=poll,
            lease_seconds=lease_seconds,
            max_resumes=max_resumes,
            once=once,
            queues=served,
            connections=connections,
            release=release or None,
            drain=drain,
        ),
        wait=not once,
    )
    if serving is None:
        return  # stopped by a signal while it waited for the database: exit 0
    serving.install_signal_handlers()
    # At the process's exit, what is still alive is left to the operating system rather
    # than to the collector's last pass over the heap, which took about 0.3 s after a drain
    # of a thousand runs (docs/performance/workers.md, A thousand runs in one worker). Python does
    # not promise to finalise the objects alive at exit anyway. At exit, not now: a worker
    # served in a process that goes on (a test's) leaves its collector as it was.
    atexit.register(gc.freeze)
    with traces_from_environment():
        # What start-up made (modules, SQLAlchemy's tables and compiled statements) lives as
        # long as the process: frozen, the collector's full passes while runs start skip it.
        # They went over it two or three times a drain of a thousand runs, 0.2 to 0.5 s each
        # with every thread stopped; 0.05 s frozen (docs/performance/workers.md, A thousand runs).
        gc.freeze()
        # And the collector's full passes made rarer while it serves: what a thousand runs
        # in flight hold is not garbage (every full pass of a drain freed nothing), yet each
        # pass went over all of it with every thread stopped, 0.04 to 0.15 s, two or three
        # a drain. Cycles die young, in the passes over the younger generations, which are
        # as before; a full pass still comes, after ten times as many of them.
        thresholds = gc.get_threshold()
        gc.set_threshold(*thresholds[:2], thresholds[2] * FULL_PASS_SPACING)
        try:
            serving.serve()
        finally:
            # A process that goes on (a test's) gets its collector back as it was.
            gc.set_threshold(*thresholds)
            gc.unfreeze()
