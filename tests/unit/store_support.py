"""What the unit tests of the service on the in-memory store share."""

from __future__ import annotations

from typing import Any

from runner import Runner
from runner.core.clock import ManualClock
from runner.store.protocol import Claim
from runner.testing import InMemoryStore

OWNER = "tester:1:1"
ELSEWHERE = "another-host.example:4242:123"
LEASE = 30.0


def memory_runner(**kwargs: Any) -> tuple[Runner, InMemoryStore, ManualClock]:
    """A runner on a fresh in-memory store, and the store and its clock."""
    clock = ManualClock()
    store = InMemoryStore(clock=clock)
    return Runner(store=store, lease_seconds=LEASE, **kwargs), store, clock


def batch(store: InMemoryStore, limit: int, owner: str = OWNER, **kwargs: Any) -> list[str]:
    """The ids a worker's claim of up to `limit` runs takes."""
    taken = store.claim_some(limit=limit, owner=owner, lease_seconds=LEASE, max_resumes=3, **kwargs)
    return [claim.run.id for claim in taken]


def claim(store: InMemoryStore, owner: str = OWNER, **kwargs: Any) -> Claim | None:
    taken = store.claim_some(limit=1, owner=owner, lease_seconds=LEASE, max_resumes=3, **kwargs)
    return taken[0] if taken else None


def claimed_ids(store: InMemoryStore, **kwargs: Any) -> list[str]:
    found = []
    while (taken := claim(store, **kwargs)) is not None:
        found.append(taken.run.id)
    return found


def finish(store: InMemoryStore, run_id: str) -> None:
    """The run ended (as its worker's last write would leave its row)."""
    store.runs[run_id].update(status="finished", lease_owner=None, lease_expires_at=None)
