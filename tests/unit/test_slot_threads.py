"""A worker's slot threads (runner.service.slot_threads): daemon threads, one per piece of
work at a time, kept for the next piece once theirs ends, and told to end (not joined) once
closed."""

from __future__ import annotations

import threading

import pytest

from runner.service.slot_threads import SlotThreads
from tests.conditions import wait_until


def test_work_runs_on_a_named_daemon_thread() -> None:
    seen: list[threading.Thread] = []
    ran = threading.Event()
    with SlotThreads("runner-run") as slots:
        slots.submit(lambda: (seen.append(threading.current_thread()), ran.set()))
        assert ran.wait(60)
    assert seen[0].daemon
    assert seen[0].name == "runner-run_1"


def test_a_thread_whose_work_ended_takes_the_next_rather_than_a_new_one() -> None:
    with SlotThreads("slot") as slots:
        for _ in range(3):
            done = threading.Event()
            slots.submit(done.set)
            assert done.wait(60)
            # Idle again before the next piece: the same thread takes it.
            wait_until(lambda: slots.idle() == 1)
        assert slots.started() == 1


def test_work_in_flight_at_once_each_has_a_thread() -> None:
    release = threading.Event()
    running = threading.Semaphore(0)

    def hold() -> None:
        running.release()
        release.wait(10)

    with SlotThreads("slot") as slots:
        for _ in range(3):
            slots.submit(hold)
        for _ in range(3):
            assert running.acquire(timeout=60)
        release.set()
    assert slots.started() == 3


def test_what_the_work_raises_leaves_its_thread_to_take_the_next() -> None:
    def fail() -> None:
        raise KeyboardInterrupt  # a BaseException, as a worker's slot re-raises

    done = threading.Event()
    with SlotThreads("slot") as slots:
        slots.submit(fail)
        wait_until(lambda: slots.idle() == 1)
        slots.submit(done.set)
        assert done.wait(60)
        assert slots.started() == 1


def test_closed_the_idle_threads_end_and_the_busy_one_after_its_work() -> None:
    release = threading.Event()
    started = threading.Event()
    with SlotThreads("closing") as slots:
        slots.submit(lambda: None)
        wait_until(lambda: slots.idle() == 1)
        slots.submit(lambda: (started.set(), release.wait(10)))
        slots.submit(lambda: None)  # a second thread: the first is busy
        assert started.wait(60)
        wait_until(lambda: slots.idle() == 1)
    wait_until(lambda: slots.idle() == 0 and living("closing") == 1)  # the busy one
    release.set()
    wait_until(lambda: living("closing") == 0)
    with pytest.raises(RuntimeError, match="closed"):
        slots.submit(lambda: None)


def living(prefix: str) -> int:
    return sum(t.name.startswith(f"{prefix}_") for t in threading.enumerate())
