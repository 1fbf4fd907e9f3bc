"""A heartbeat's thread is woken by a lease held only when it lingers with nothing held
(runner.sql.heartbeat): a worker filling a thousand slots woke it at every one."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Engine

from runner.sql.heartbeat import Heartbeat


@dataclass
class Lease:
    run_id: str
    epoch: int = 1

    def renewed(self, started: float) -> None:
        pass

    def taken_over(self) -> None:
        pass


class Counted(threading.Condition):
    """A condition that counts its notify_all calls."""

    def __init__(self) -> None:
        super().__init__()
        self.woken = 0

    def notify_all(self) -> None:
        self.woken += 1
        super().notify_all()


def test_a_lease_held_beside_others_does_not_wake_the_thread() -> None:
    # No beat comes within the test (an hour apart): the engine is never used.
    beat = Heartbeat(cast(Engine, None), lease_seconds=60, interval=3600)
    changed = Counted()
    beat._changed = changed
    first, second, third = Lease("a"), Lease("b"), Lease("c")
    try:
        beat.hold(first)  # the first: starts the thread
        woken = changed.woken
        beat.hold(second)
        beat.hold(third)
        assert changed.woken == woken
        beat.drop(first)
        beat.drop(second)
        beat.drop(third)  # nothing held: the thread lingers, woken to see it
        assert changed.woken == woken + 1
        beat.hold(first)  # it lingers: woken to go on beating
        assert changed.woken == woken + 2
    finally:
        beat.close()
