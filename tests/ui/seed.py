"""A history for the page's tests: two releases of one agent (the second one regressed to
max_steps), a long run, a failing run, a hostile run, a queued run and a running one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runner import Runner
from runner.sql import leases

from .agents import HOSTILE

AGENTS = Path(__file__).with_name("agents.py")
LONG_STEPS = 120


def ref(name: str) -> str:
    return f"{AGENTS}:{name}"


@dataclass
class Seeded:
    url: str
    finished: list[str] = field(default_factory=list)
    long: str = "long-1"
    hostile: str = "hostile-1"
    failing: str = "fail-1"
    queued: str = "queued-1"
    to_cancel: str = "cancel-me"
    running: str = "running-1"


def seed(url: str) -> Seeded:
    seeded = Seeded(url)
    with Runner(url) as runner:
        for i in range(10):
            seeded.finished.append(runner.run(ref("shop_r1"), f"ok {i}", id=f"r1-{i:02d}").run_id)
        for i in range(10):
            task = f"ok {i}" if i % 2 else f"loop {i}"
            seeded.finished.append(runner.run(ref("shop_r2"), task, id=f"r2-{i:02d}").run_id)
        runner.run(ref("long"), "loop for long", id=seeded.long)
        runner.run(ref("shop_r2"), "fail now", id=seeded.failing)
        runner.run(ref("hostile"), "hostile " + HOSTILE, id=seeded.hostile)
        runner.set_limit("openai/gpt-4.1", tokens_per_minute=60_000, requests_per_minute=300)
        runner.submit(ref("shop_r1"), "ok later", id=seeded.queued)
        runner.submit(ref("shop_r1"), "ok cancel me", id=seeded.to_cancel)
        runner.submit(ref("shop_r1"), "ok running", id=seeded.running)
        # A worker (this process, alive) holds it: the page shows a live owner and lease.
        leases.claim_run(
            runner.engine,
            seeded.running,
            owner=runner.owner,
            lease_seconds=3600,
            max_resumes=3,
            steal=False,
            clock=runner.clock,
        )
    return seeded
