"""A watched call in flight is watched by one thread for all calls (runner.core.watching):
its caller sleeps until the call ends or its watch names a reason, instead of waking every
WATCH_EVERY seconds to ask (5,000 wake-ups a second in a worker of a thousand runs)."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from runner.core.calls import invoke
from runner.core.interrupts import CallInterrupted
from runner.core.watching import Watcher
from tests.conditions import scaled, wait_until


def test_the_caller_is_not_woken_to_ask_its_watch_while_the_call_runs() -> None:
    caller = threading.get_ident()
    asked_by: list[int] = []
    release = threading.Event()

    def watch() -> str | None:
        asked_by.append(threading.get_ident())
        return None

    def call() -> str:
        release.wait(60)  # bounded: a broken watcher fails the test instead of hanging it
        return "done"

    def release_after_three_asks() -> None:
        wait_until(lambda: len(asked_by) >= 3)
        release.set()

    helper = threading.Thread(target=release_after_three_asks)
    helper.start()
    assert invoke(call, (), {}, 120.0, watch=watch) == "done"
    helper.join()
    assert caller not in asked_by[:3]  # the watcher asked, not the sleeping caller


def test_a_watch_that_names_a_reason_interrupts_the_call() -> None:
    stop = threading.Event()
    release = threading.Event()

    def call() -> str:
        release.wait(60)
        return "late"

    def watch() -> str | None:
        return "cancelled" if stop.is_set() else None

    threading.Timer(0.05, stop.set).start()
    try:
        with pytest.raises(CallInterrupted, match="cancelled"):
            invoke(call, (), {}, 120.0, watch=watch)
    finally:
        release.set()


def test_a_watch_that_raises_raises_in_the_caller() -> None:
    release = threading.Event()

    def call() -> str:
        release.wait(60)
        return "late"

    def watch() -> str | None:
        raise RuntimeError("watch broke")

    try:
        with pytest.raises(RuntimeError, match="watch broke"):
            invoke(call, (), {}, 120.0, watch=watch)
    finally:
        release.set()


def test_a_watch_removed_is_kept_alive_by_nothing_of_the_watchers() -> None:
    # The watcher's thread sleeps for ever once nothing is watched: what it last asked must
    # not stay alive in it meanwhile (a run dropped unclosed kept its connections open).
    watcher = Watcher()  # a thread of its own, nothing else watched
    asked = threading.Event()

    class Run:
        def stop_requested(self) -> str | None:
            asked.set()
            return None

    run = Run()
    key = watcher.add(run.stop_requested, threading.Event())
    assert asked.wait(scaled(30))
    watcher.remove(key)
    gone = weakref.ref(run)
    del run

    def collected() -> bool:
        gc.collect()
        return gone() is None

    wait_until(collected, timeout=5, what="the watch's owner collected")
