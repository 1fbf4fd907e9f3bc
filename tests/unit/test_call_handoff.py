"""Handing a timed call to a spare thread and back (runner.core.calls): the caller's signal is
reused from call to call, so a call abandoned at its timeout, ending later, must never be
taken for the next call's end; the signals' descriptors are closed once nothing can set
them; and where there are none to spare, locks do the same work."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

import pytest

from runner.core import calls
from runner.core.calls import CallTimedOut, invoke
from tests.conditions import wait_until


@pytest.fixture(params=["eventfd", "locks"])
def signals(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "locks":
        monkeypatch.setattr(calls, "_MOST_EVENTFDS", 0)
        monkeypatch.setattr(calls, "_callers", threading.local())
        monkeypatch.setattr(calls, "_SPARE", calls._SpareThreads())
    elif not calls._EVENTFD:
        pytest.skip("no eventfd on this system")
    return str(request.param)


def test_a_late_end_of_an_abandoned_call_is_not_taken_for_the_next_calls(
    signals: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended: list[object] = []
    first_end = threading.Event()
    finish = calls._ThreadCall.finish

    def told(call: calls._ThreadCall) -> None:
        ended.append(call)  # before the caller's signal is set
        finish(call)
        first_end.set()

    monkeypatch.setattr(calls._ThreadCall, "finish", told)
    # This thread's waits, watched: once it has been woken by the abandoned call's end (on
    # an eventfd, reused; a lock is one call's), the next call's thread waits until this
    # thread waits again (or ten seconds, if it never does: it took that wake-up for its own
    # call's end).
    this_thread = threading.current_thread()
    woken_late, waits_again = threading.Event(), threading.Event()

    def watched(wait: Callable[[Any, float | None], bool]) -> Callable[[Any, float | None], bool]:
        def waiting(signal: Any, timeout: float | None) -> bool:
            if threading.current_thread() is not this_thread:
                return wait(signal, timeout)
            if woken_late.is_set():
                waits_again.set()
            woke = wait(signal, timeout)
            if woke and ended:
                woken_late.set()
            return woke

        return waiting

    for kind in (calls._Signal, calls._LockSignal):
        monkeypatch.setattr(kind, "wait", watched(kind.wait))
    release = threading.Event()
    with pytest.raises(CallTimedOut):
        invoke(release.wait, (), {}, 0.01)  # abandoned, still running, holding our signal

    def own() -> str:
        release.set()  # the abandoned call ends now and tells this test's thread...
        first_end.wait()  # ...before this call ends: that wake-up is not this call's end
        if signals == "eventfd":
            waits_again.wait(10.0)
        return "own"

    assert invoke(own, (), {}, 30.0, watch=lambda: None) == "own"
    assert waits_again.is_set() or signals == "locks"
    assert len(ended) == 2
    assert invoke(lambda: "after", (), {}, 30.0) == "after"


def test_calls_return_their_own_values_one_after_another(signals: str) -> None:
    assert [invoke(lambda i=i: i * 2, (), {}, 5.0) for i in range(200)] == [
        i * 2 for i in range(200)
    ]


def test_signals_close_once_their_threads_are_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    if not calls._EVENTFD:
        pytest.skip("no eventfd on this system")
    spares = calls._SpareThreads()  # this test's spare threads alone
    monkeypatch.setattr(calls, "_SPARE", spares)
    gc.collect()
    before = len(calls._EVENTFDS)

    def caller() -> None:
        assert invoke(lambda: 1, (), {}, 5.0) == 1

    threads = [threading.Thread(target=caller) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Each caller's signal went with its thread (once its spare thread let go of the call);
    # this test's spare threads' stay, one each.
    def closed() -> bool:
        gc.collect()
        return len(calls._EVENTFDS) <= before + len(spares._idle)

    wait_until(closed, timeout=10.0, what="the callers' signals closed")


def test_idle_spare_threads_end(signals: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls._SpareThreads, "IDLE_SECONDS", 0.05)
    spares = calls._SpareThreads()
    monkeypatch.setattr(calls, "_SPARE", spares)
    release = threading.Event()
    ran: list[threading.Thread] = []

    def wait_for_release() -> None:
        ran.append(threading.current_thread())
        release.wait()

    def ok() -> str:
        ran.append(threading.current_thread())
        return "ok"

    with pytest.raises(CallTimedOut):
        invoke(wait_for_release, (), {}, 0.01)  # one thread busy, one more call on another
    assert invoke(ok, (), {}, 5.0) == "ok"
    assert len(set(ran)) == 2
    release.set()
    wait_until(
        lambda: not spares._idle and not any(thread.is_alive() for thread in ran),
        timeout=10.0,
        what="the idle spare threads ended",
    )
    # Ended threads leave nothing that would take the next call: it gets a new thread.
    assert invoke(lambda: threading.current_thread(), (), {}, 5.0) not in ran


def test_no_descriptor_is_spent_past_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "_MOST_EVENTFDS", len(calls._EVENTFDS))
    monkeypatch.setattr(calls, "_callers", threading.local())
    monkeypatch.setattr(calls, "_SPARE", calls._SpareThreads())
    before = set(calls._EVENTFDS)
    assert invoke(lambda: "ok", (), {}, 5.0, watch=lambda: None) == "ok"
    assert set(calls._EVENTFDS) <= before


def test_a_call_handed_over_before_its_thread_waits_again_is_no_error(
    signals: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spare thread is held after telling its caller, twice: each time the next call is
    # handed over before the thread looks for it, so it runs the second without waiting
    # and the third is handed over while the second's wake-up is still pending.
    spares = calls._SpareThreads()
    monkeypatch.setattr(calls, "_SPARE", spares)
    held = [threading.Event(), threading.Event()]
    told = 0
    finish = calls._ThreadCall.finish

    def finish_then_hold(call: calls._ThreadCall) -> None:
        nonlocal told
        told += 1  # before the caller is told, so it counts every call it was told of
        finish(call)
        if told <= len(held):
            held[told - 1].wait(30.0)

    monkeypatch.setattr(calls._ThreadCall, "finish", finish_then_hold)
    assert invoke(lambda: 1, (), {}, 5.0) == 1
    for value, hold in zip((2, 3), held, strict=True):
        call = calls._ThreadCall(lambda value=value: value, (), {})
        spares.run(call)  # the same thread's: it is idle, held before it waits
        hold.set()
        assert call.result(5.0, None) == value
    assert told == 3


def test_a_call_timed_beyond_what_one_wait_can_take_returns_its_value(signals: str) -> None:
    # A tool timeout, or a run's time budget, of 30 days: more milliseconds than poll takes.
    thirty_days = 30 * 86400.0
    assert invoke(lambda: "done", (), {}, thirty_days) == "done"
    release = threading.Event()

    def slow() -> str:
        release.wait(30.0)
        return "slow"

    threading.Timer(0.05, release.set).start()
    assert invoke(slow, (), {}, thirty_days) == "slow"
