"""A spare thread is woken on its caller's processor (runner.core.calls._Nearby): held to it
for a short call, given its own affinity back once a call runs past LET_GO_AFTER, so that a
long or abandoned call is never kept to one processor; and a held call still times out."""

from __future__ import annotations

import os
import threading

import pytest

from runner.core import calls
from runner.core.calls import CallTimedOut, invoke
from tests.conditions import wait_until

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs thread affinities and two processors",
)


@pytest.fixture(autouse=True)
def fresh_spares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "_SPARE", calls._SpareThreads())
    monkeypatch.setattr(calls, "_NEARBY", calls._Nearby())


def affinity_inside() -> tuple[int, set[int]]:
    return threading.get_native_id(), os.sched_getaffinity(0)


def test_a_short_call_runs_held_to_one_processor_on_a_thread_kept_from_the_last() -> None:
    first, _ = invoke(affinity_inside, (), {}, 5.0)  # a new thread: nothing to hold yet
    second, held = invoke(affinity_inside, (), {}, 5.0)
    assert second == first
    assert len(held) == 1 and held <= os.sched_getaffinity(0)


def test_a_call_running_past_the_short_wait_is_let_go() -> None:
    invoke(affinity_inside, (), {}, 5.0)  # a spare thread, idle, to be held next
    whole = os.sched_getaffinity(0)
    started, release = threading.Event(), threading.Event()
    inside: dict[str, object] = {}

    def long_call() -> set[int]:
        inside["thread"] = threading.get_native_id()
        inside["at_start"] = os.sched_getaffinity(0)
        started.set()
        release.wait(30)
        return os.sched_getaffinity(0)

    def release_once_let_go() -> None:
        try:
            started.wait(30)
            thread = inside["thread"]
            assert isinstance(thread, int)
            wait_until(lambda: os.sched_getaffinity(thread) == whole, timeout=10)
        finally:
            release.set()

    helper = threading.Thread(target=release_once_let_go)
    helper.start()
    after = invoke(long_call, (), {}, 20.0)
    helper.join()
    held = inside["at_start"]
    assert isinstance(held, set) and len(held) == 1  # it was held when it woke
    assert after == whole


def test_a_held_call_that_never_returns_still_times_out() -> None:
    invoke(affinity_inside, (), {}, 5.0)
    never = threading.Event()
    with pytest.raises(CallTimedOut):
        invoke(lambda: never.wait(), (), {}, 0.2)
    never.set()
