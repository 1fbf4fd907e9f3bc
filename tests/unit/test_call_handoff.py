"""Handing a timed call to a spare thread and back (runner.core.calls): the caller's signal is
reused from call to call, so a call abandoned at its timeout, ending later, must never be
taken for the next call's end; the signals' descriptors are closed once nothing can set
them; and where there are none to spare, locks do the same work."""

from __future__ import annotations

import gc
import threading

import pytest

from runner.core import calls
from runner.core.calls import CallTimedOut, invoke


def wait_until(condition: object, seconds: float = 10.0) -> None:
    ended = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if condition():  # type: ignore[operator]
            return
        ended.wait(0.01)
    raise AssertionError("condition never held")


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
        ended.append(call)
        finish(call)  # the caller's signal set
        first_end.set()

    monkeypatch.setattr(calls._ThreadCall, "finish", told)
    release = threading.Event()
    with pytest.raises(CallTimedOut):
        invoke(release.wait, (), {}, 0.01)  # abandoned, still running, holding our signal

    def own() -> str:
        release.set()  # the abandoned call ends now and tells this test's thread...
        first_end.wait()  # ...before this call ends: that wake-up is not this call's end
        return "own"

    assert invoke(own, (), {}, 30.0, watch=lambda: None) == "own"
    assert len(ended) == 2
    assert invoke(lambda: "after", (), {}, 30.0) == "after"


def test_calls_return_their_own_values_one_after_another(signals: str) -> None:
    assert [invoke(lambda i=i: i * 2, (), {}, 5.0) for i in range(200)] == [
        i * 2 for i in range(200)
    ]


def test_signals_close_once_their_threads_are_gone() -> None:
    if not calls._EVENTFD:
        pytest.skip("no eventfd on this system")
    gc.collect()
    before = len(calls._EVENTFDS)

    def caller() -> None:
        assert invoke(lambda: 1, (), {}, 5.0) == 1

    threads = [threading.Thread(target=caller) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gc.collect()
    # Each caller's signal went with its thread; the spare threads' stay, at most one each.
    spares = len(calls._SPARE._idle)
    assert len(calls._EVENTFDS) <= before + spares


def test_idle_spare_threads_end(signals: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls._SpareThreads, "IDLE_SECONDS", 0.05)
    spares = calls._SpareThreads()
    monkeypatch.setattr(calls, "_SPARE", spares)
    release = threading.Event()
    with pytest.raises(CallTimedOut):
        invoke(release.wait, (), {}, 0.01)  # one thread busy, one more call on another
    assert invoke(lambda: "ok", (), {}, 5.0) == "ok"
    release.set()
    wait_until(lambda: not spares._idle)
    # Ended threads leave nothing that would take the next call: it gets a new thread.
    assert invoke(lambda: threading.current_thread().name, (), {}, 5.0) == "runner-call"


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
