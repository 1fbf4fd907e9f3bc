"""Releases in the fleet: the rules both stores keep about which worker may take which run.

Each run records the release of the agent that started it (`runs.release`), and each
worker knows its own release (`Releases`). A queue's policy (`OlderReleases`) says what a
worker does with a run of the queue whose release is not its own:

- `continue`: it takes the run and runs it on with its own code (the default);
- `pin`: it does not take it: only a worker of the run's release does, for a claim as for a
  takeover (`may_take` says so, and the SQL claim asks the same of its rows);
- `check`: it takes it, but before it runs it on it replays the run's journal against its
  own code; a divergence parks the run (`PARKED_BY_CHECK`), and a parked run, in any queue,
  is taken from then on only by a worker of its own release.

A run with no release recorded, or a worker's release equal to the run's, is never held
back. A worker that drains (`Releases.only`) takes the runs of its own release alone.
None of it reads a database.

The same rules in SQL are `sql/releases.py` (the claim's condition, the parking, `runner
releases`' counts), in memory `testing/memory_releases.py`; the check and the replay gate are
`service/releases.py`, run by a worker (`service/worker.py`) on each claim it executes
(`service/claim_execution.py`); the commands `cli/releases.py` and
`cli/queues.py` (`--older-releases`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class OlderReleases(StrEnum):
    """A queue's policy for its runs whose release is not the worker's."""

    CONTINUE = "continue"  # run it on with the worker's code, as if nothing changed
    PIN = "pin"  # leave it to a worker of its own release
    CHECK = "check"  # replay its journal against the worker's code first; park it if it differs


# The reason a failed check parks a run with (runs.parked_reason).
PARKED_BY_CHECK = "check_failed"


def check_policy(value: object) -> OlderReleases:
    """The policy named by `value` (ValueError names the three)."""
    try:
        return OlderReleases(str(value).strip().lower())
    except ValueError:
        choices = ", ".join(policy.value for policy in OlderReleases)
        raise ValueError(f"older releases: {value!r} is not one of {choices}") from None


@dataclass(frozen=True)
class Releases:
    """The release a worker runs each run with, as its claims see it.

    `release`: the worker's own, given (`runner worker --release`, RUNNER_RELEASE); None: each
    agent's, as the worker's code declares it (`Agent(release=...)`), known in `agents` (agent
    reference -> release) once the worker has loaded the agent. A run of an agent not loaded
    yet may be taken: loading it tells, and a run that was not the worker's to take is given
    back (`may_take` again, on the loaded agent). `only`: take the runs of `release` alone
    (`runner worker --drain`).
    """

    release: str | None = None
    agents: Mapping[str, str | None] = field(default_factory=dict)
    only: bool = False

    def of(self, agent: str | None) -> str | None:
        """The release this worker runs `agent`'s runs with (None: none known)."""
        if self.release is not None or agent is None:
            return self.release
        return self.agents.get(agent)

    def knows(self, agent: str | None) -> bool:
        """Whether the worker knows its release for `agent`'s runs before loading it."""
        return self.release is not None or (agent is not None and agent in self.agents)


def held_back(run_release: str | None, worker_release: str | None) -> bool:
    """Whether a run of `run_release` is of another release than the worker's."""
    return run_release is not None and run_release != worker_release


def may_take(
    releases: Releases,
    *,
    agent: str | None,
    run_release: str | None,
    policy: OlderReleases,
    parked: bool,
) -> bool:
    """Whether a worker of `releases` may claim a run (of `agent`, recorded under
    `run_release`, in a queue of `policy`, `parked` by a check or not). A run of an agent the
    worker has not loaded yet may be taken, unless the worker's release is given."""
    if releases.only:
        return run_release is not None and run_release == releases.release
    if not (parked or policy is OlderReleases.PIN):
        return True
    if not releases.knows(agent):
        return True
    return not held_back(run_release, releases.of(agent))


@dataclass(frozen=True)
class ReleaseInfo:
    """A release (of one agent) as `runner releases` shows it: its unfinished runs."""

    agent_name: str | None
    release: str | None
    running: int  # status running (under a live lease or not)
    queued: int  # queued and claimable now
    waiting: int  # waiting for a person's answer or a child run
    parked: int  # queued, held back: until a wake-up time (a limit, --at) or by a check
    check_failed: int  # unfinished runs a failed check parked (only its release takes them)
