"""Releases in SQL: a queue's policy for runs of another release (`queues.older_releases`),
the part of a claim that leaves a worker's runs of another release alone, and each release's
unfinished runs (`runner releases`). A failed check parks a run through runner.sql.leases'
`release_run` (`runs.parked_reason`).

The rules themselves are runner.store.releases (`may_take`): the claim's condition here is
the same rule, written as SQL over the rows a claim reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Engine, and_, bindparam, case, func, literal, or_, select

from runner.core.clock import SYSTEM, Clock, utc_now
from runner.core.status import RunStatus
from runner.sql.runs import reading, store_named
from runner.sql.schema import queues, runs
from runner.store.releases import OlderReleases, ReleaseInfo, Releases, check_policy
from runner.store.rows import RunRow
from runner.store.rules import check_queue

# How a claim's queries keep to a worker's release: not at all (""), its given release
# ("given"), its agents' releases as loaded so far ("agents"), or its release alone ("only").
Keeping = Literal["", "given", "agents", "only"]

# The queues that pin their runs to their release, read inside the claim's own statement:
# no statement more per claim (PostgreSQL hashes it once, SQLite keeps it as a table).
_PINNED = select(queues.c.name).where(queues.c.older_releases == OlderReleases.PIN.value)
# An agent's reference and a release, joined as one value to compare pairs with one IN.
_SEPARATOR = "\n"


@dataclass(frozen=True)
class Kept:
    """A claim's keeping to a worker's release: the shape of its condition and its values."""

    kind: Keeping = ""
    params: Mapping[str, Any] = field(default_factory=dict)


NOT_KEPT = Kept()


def kept_to(releases: Releases | None) -> Kept:
    """How a claim by a worker of `releases` keeps to it."""
    kind = keeping(releases)
    return NOT_KEPT if kind == "" else Kept(kind, bounds(releases))


def policy_of(engine: Engine, name: str) -> OlderReleases:
    """Queue `name`'s policy for runs of older releases (no row, or NULL: `continue`)."""
    with reading(engine) as connection:
        found = connection.execute(
            select(queues.c.older_releases).where(queues.c.name == name)
        ).scalar()
    return OlderReleases(found) if found else OlderReleases.CONTINUE


def keeping(releases: Releases | None) -> Keeping:
    """Which condition a claim by a worker of `releases` needs."""
    if releases is None:
        return ""
    if releases.only:
        return "only"
    if releases.release is not None:
        return "given"
    return "agents" if releases.agents else ""


def condition(kind: Keeping) -> Any:
    """The claim's condition for `kind`, bound by `bounds`: runner.store.releases.may_take
    over a row of runs."""
    if kind == "only":
        return runs.c.release == bindparam("release")
    held = runs.c.parked_reason.is_not(None) | runs.c.queue.in_(_PINNED)
    if kind == "given":
        mine = runs.c.release == bindparam("release")
    else:
        pair = runs.c.agent + literal(_SEPARATOR) + runs.c.release
        mine = or_(
            runs.c.agent.is_(None),
            runs.c.agent.not_in(bindparam("known", expanding=True)),
            pair.in_(bindparam("pairs", expanding=True)),
        )
    return or_(~held, runs.c.release.is_(None), mine)


def bounds(releases: Releases | None) -> dict[str, Any]:
    """The values `condition` binds."""
    kind = keeping(releases)
    if releases is None or kind == "":
        return {}
    params: dict[str, Any] = {}
    if kind in ("given", "only"):
        params["release"] = releases.release
    if kind == "agents":
        params["known"] = list(releases.agents)
        params["pairs"] = [
            f"{agent}{_SEPARATOR}{release}"
            for agent, release in releases.agents.items()
            if release is not None
        ]
    return params


def set_policy(
    engine: Engine, name: str, policy: OlderReleases | str, clock: Clock = SYSTEM
) -> None:
    """Store queue `name`'s policy for runs of another release than a worker's."""
    check_queue(name)
    chosen = check_policy(policy)
    values = {
        # NULL is `continue`: a queue's row made for a limit says nothing of releases.
        "older_releases": None if chosen is OlderReleases.CONTINUE else chosen.value,
        "updated_at": utc_now(clock),
    }
    store_named(engine, queues, name, values, f"the older-releases policy of queue {name}")


def list_releases(engine: Engine, at: datetime) -> list[ReleaseInfo]:
    """Each release (of each agent) with an unfinished run, and how those runs stand."""
    queued = runs.c.status == RunStatus.QUEUED
    parked = queued & (
        runs.c.parked_reason.is_not(None)
        | (runs.c.not_before.is_not(None) & (runs.c.not_before > at))
    )

    def count(condition: Any) -> Any:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    query = (
        select(
            runs.c.agent_name,
            runs.c.release,
            count(runs.c.status == RunStatus.RUNNING),
            count(and_(queued, ~parked)),
            count(runs.c.status == RunStatus.WAITING),
            count(parked),
            count(runs.c.parked_reason.is_not(None)),
        )
        .where(runs.c.status.in_((RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)))
        .group_by(runs.c.agent_name, runs.c.release)
    )
    with reading(engine) as connection:
        rows = connection.execute(query).all()
    found = [
        ReleaseInfo(name, release, *(int(n) for n in counts)) for name, release, *counts in rows
    ]
    return sorted(found, key=lambda info: (info.agent_name or "", info.release or ""))


def recorded_runs(
    engine: Engine, *, since: datetime | None, agent: str | None, limit: int
) -> list[RunRow]:
    """The newest `limit` finished runs with an agent reference (of `agent` if given), that
    finished at `since` or later: what a deploy gate replays."""
    query = select(runs).where(runs.c.status == RunStatus.FINISHED, runs.c.agent.is_not(None))
    if agent is not None:
        query = query.where(runs.c.agent == agent)
    if since is not None:
        query = query.where(runs.c.finished_at >= since)
    query = query.order_by(runs.c.finished_at.desc(), runs.c.id.desc()).limit(limit)
    with reading(engine) as connection:
        return [RunRow.of(row) for row in connection.execute(query)]
