"""`runner schedule add|list|pause|resume|rm|fire`: runs started on a cron schedule."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import click

from runner.cli import output, report_output
from runner.cli.options import (
    DURATION,
    START_TIME,
    Whole,
    budget_options,
    db_option,
    given,
    json_option,
)


@click.group()
def schedule() -> None:
    """Runs started on a cron schedule: exactly one run per tick, fired by the workers.

    Each tick's run has the id NAME-YYYYMMDDTHHMM (the tick in UTC), so no two workers,
    on any number of machines, ever start two runs of one tick. `runner list --schedule
    NAME` lists a schedule's runs, `runner stats --by schedule` their stop reasons.
    """


@schedule.command()
@click.argument("name")
@click.argument("agent")
@click.argument("task")
@click.option(
    "--cron",
    required=True,
    metavar="EXPR",
    help='When: five cron fields, minute hour day-of-month month day-of-week ("0 * * * *").',
)
@click.option(
    "--tz",
    "timezone",
    default="UTC",
    show_default=True,
    metavar="ZONE",
    help="The time zone the cron fields are read in (an IANA name: Europe/Paris).",
)
@click.option(
    "--queue", default=None, metavar="NAME", help="The queue of its runs (default: default)."
)
@click.option(
    "--priority",
    type=Whole(-(2**31), 2**31 - 1),
    default=None,
    help="The priority of its runs in their queue (default 0).",
)
@click.option(
    "--catch-up",
    type=click.Choice(["last", "skip"]),
    default="last",
    show_default=True,
    help="A tick found late (no worker was up at its time): run the last one due, or none.",
)
@click.option(
    "--overlap",
    type=click.Choice(["skip", "allow"]),
    default="skip",
    show_default=True,
    help="A tick while the previous tick's run is unfinished: skip it, or run beside it.",
)
@budget_options
@db_option
@json_option
def add(
    name: str,
    agent: str,
    task: str,
    cron: str,
    timezone: str,
    queue: str | None,
    priority: int | None,
    catch_up: Any,
    overlap: Any,
    url: str | None,
    as_json: bool,
    **budgets: Any,
) -> None:
    """Add schedule NAME: a run of AGENT on TASK at every tick of --cron.

    Workers fire the ticks (`runner worker`); the budget flags are each run's (default:
    the agent's).
    """
    from runner.service.runner import Runner

    with Runner(url) as runner:
        added = runner.add_schedule(
            name, agent, task, cron=cron, timezone=timezone, queue=queue, priority=priority,
            catch_up=catch_up, overlap=overlap, **given(budgets),
        )  # fmt: skip
    if as_json:
        output.print_json(report_output.schedule_json(added))
    else:
        when = report_output.tick_time(added.next_tick_at, added.timezone)
        output.line(f"schedule {added.name}: next tick {when}")


@schedule.command(name="list")
@db_option
@json_option
def list_(url: str | None, as_json: bool) -> None:
    """Every schedule: its cron and zone, its rules, its next tick and what its last did."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        found = runner.schedules()
    if as_json:
        output.print_json([report_output.schedule_json(row) for row in found])
    else:
        output.line(report_output.schedules_table(found))


@schedule.command()
@click.argument("name")
@db_option
def pause(name: str, url: str | None) -> None:
    """Fire no tick of schedule NAME until it is resumed."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        runner.pause_schedule(name)
    output.line(f"schedule {name}: paused")


@schedule.command()
@click.argument("name")
@db_option
def resume(name: str, url: str | None) -> None:
    """Fire schedule NAME again, from its first tick after now (no catch-up of the pause)."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        row = runner.resume_schedule(name)
    when = report_output.tick_time(row.next_tick_at, row.timezone)
    output.line(f"schedule {name}: next tick {when}")


@schedule.command()
@click.argument("name")
@db_option
def rm(name: str, url: str | None) -> None:
    """Remove schedule NAME; the runs it started stay."""
    from runner.service.runner import Runner

    with Runner(url) as runner:
        runner.remove_schedule(name)
    output.line(f"schedule {name}: removed")


@schedule.command()
@click.option(
    "--at",
    "fire_at",
    type=START_TIME,
    default=None,
    help="Fire what is due at this ISO 8601 time instead of now (UTC unless it has an offset).",
)
@click.option(
    "--in",
    "fire_in",
    type=DURATION,
    default=None,
    help="Fire what is due this long from now: 30s, 10m, 2h, 1d.",
)
@db_option
@json_option
def fire(
    fire_at: datetime | None, fire_in: timedelta | None, url: str | None, as_json: bool
) -> None:
    """Fire the ticks due now, as a worker does at each look (a worker fires them by itself).

    With --at or --in, the ticks due at that time: to try a schedule out, or to start its
    next tick early. Each tick still starts one run at most, whoever fires it.
    """
    if fire_at is not None and fire_in is not None:
        raise click.UsageError("give --at or --in, not both")
    from runner.service.runner import Runner

    with Runner(url) as runner:
        at = fire_at or runner.now() + (fire_in or timedelta(0))
        fired = runner.fire_schedules(at)
        zones = {row.name: row.timezone for row in runner.schedules()} if fired else {}
    if as_json:
        output.print_json([report_output.fired_json(tick) for tick in fired])
        return
    if not fired:
        output.line("no tick due")
    for tick in fired:
        output.line(report_output.fired_line(tick, zones.get(tick.schedule, "UTC")))
