"""Provider limits on the in-memory store (the SQL store's rule, runner.sql.reservations
.Room): a model call reserves before and settles with its reported usage after; a run with
no room parks (queued with a wake-up time, no lease) and journals how long it waited; a
429's Retry-After holds back every run of the limit; the line is first come, first served.
Both databases' races, crashes and shared back-offs are in tests/integration/test_limits.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent
from runner.core.clock import ManualClock, utc_now
from runner.core.journal import EntryKind
from runner.core.limits import DEFAULT_OUTPUT_TOKENS, estimate_tokens, limit_of
from runner.core.status import RunStatus
from runner.errors import LimitNotFound, ModelRetryable, RunParked
from runner.service.worker import Worker
from runner.testing import FunctionModel, InMemoryStore, ScriptedModel, call, final, tool_results
from tests.conditions import scaled, wait_until

from .store_support import LEASE, memory_runner


def add(a: float, b: float) -> float:
    return a + b


def counted(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Two calls of `add`, then the answer: each model call reports 300 tokens."""
    done = tool_results(transcript)
    move = final("done") if len(done) >= 2 else call("add", a=len(done), b=1)
    return {**move, "usage": 300}


AGENT = Agent(FunctionModel(counted), {"add": add}, limit="m")


def test_the_estimate_is_the_prompt_at_four_characters_a_token_plus_the_allowance() -> None:
    shown = [{"role": "user", "content": "x" * 400}]
    assert estimate_tokens(shown, 50) == 50 + estimate_tokens(shown, 0)
    assert 100 < estimate_tokens(shown, 0) < 120
    assert estimate_tokens(shown, None) == estimate_tokens(shown, 0) + DEFAULT_OUTPUT_TOKENS


def test_an_agent_names_its_limit_else_the_model_does() -> None:
    class Named:
        limit = "openai/gpt-4.1"

        def __call__(self, transcript: list[dict[str, Any]]) -> Any:
            return final("x")

    assert limit_of(Named()) == "openai/gpt-4.1"
    assert Agent(Named()).limit == "openai/gpt-4.1"
    assert Agent(Named(), limit="pool").limit == "pool"
    assert Agent(ScriptedModel(["x"])).limit is None
    with pytest.raises(ValueError):
        Agent(ScriptedModel(["x"]), limit="")


def test_each_model_call_reserves_then_settles_with_the_reported_usage() -> None:
    runner, store, _clock = memory_runner()
    runner.set_limit("m", tokens_per_minute=100_000, requests_per_minute=100)
    result = runner.run(AGENT, "add")
    assert result.stop_reason == "final"
    [info] = runner.limits()
    assert (info.requests, info.tokens, info.in_flight, info.waiting) == (3, 900, 0, 0)
    assert all(row["settled"] for row in store.reservations.values())


def test_a_run_with_no_room_parks_and_journals_how_long_it_waited() -> None:
    """Two requests a minute, three model calls: the third waits for the first to age out.
    `Runner.run` waits in its own process (on the store's manual clock, at once)."""
    runner, store, _clock = memory_runner()
    runner.set_limit("m", requests_per_minute=2)
    result = runner.run(AGENT, "add")
    assert result.stop_reason == "final"
    waits = [e for e, _ in store.load_entries(result.run_id) if e.kind is EntryKind.LIMIT_WAIT]
    assert len(waits) == 1
    assert waits[0].args is not None and waits[0].args["limit"] == "m"
    assert 50 < waits[0].args["waited_seconds"] <= 62
    assert "for limit m" in waits[0].content


@contextlib.contextmanager
def serving(store: InMemoryStore, **kwargs: Any) -> Iterator[Worker]:
    """A worker serving `store` on a thread, stopped on leaving."""
    worker = Worker(store=store, poll=0.01, lease_seconds=LEASE, **kwargs)
    thread = threading.Thread(target=worker.serve)
    thread.start()
    try:
        yield worker
    finally:
        worker.stopping.set()
        worker._wake.set()
        thread.join()


def drain(store: InMemoryStore, clock: ManualClock, **kwargs: Any) -> None:
    """`runner worker --once` on `store`, to its end; whenever no run is running, the clock
    moves on to the first wake-up of a run parked by a limit (time passing, at once)."""
    worker = Worker(store=store, once=True, poll=0.01, lease_seconds=LEASE, **kwargs)
    thread = threading.Thread(target=worker.serve)
    thread.start()

    def over() -> bool:
        thread.join(0.01)
        if not thread.is_alive():
            return True
        if any(row["status"] == RunStatus.RUNNING for row in store.runs.values()):
            return False
        now = utc_now(clock)
        wakes = [store.runs[run_id]["not_before"] for _, run_id in store.limit_waiters]
        later = [wake for wake in wakes if wake is not None and wake > now]
        if later:
            clock.advance((min(later) - now).total_seconds())
        return False

    try:
        wait_until(over, what="the drain's end")
    finally:
        worker.stopping.set()
        thread.join()


def test_a_worker_parks_the_run_without_holding_it() -> None:
    runner, store, clock = memory_runner()
    runner.set_limit("m", requests_per_minute=1)
    run_id = runner.submit(AGENT, "add")
    with serving(store):
        wait_until(lambda: runner.limits()[0].waiting == 1, what="the run parked")
        row = runner.row(run_id)
        assert row.status is RunStatus.QUEUED and row.lease_owner is None
        assert row.not_before is not None and row.not_before > runner.now()
        [info] = runner.limits()
        assert (info.requests, info.waiting) == (1, 1)
    drain(store, clock)
    assert runner.get(run_id).stop_reason == "final"


def test_a_drain_finishes_the_runs_it_started_paced_to_their_limit() -> None:
    """`runner worker --once` under two requests a minute: the three runs it starts (three
    model calls each) are finished, each call in turn as the limit has room, not left
    parked half done; a run delayed by an hour, not started, is left queued."""
    runner, store, clock = memory_runner()
    runner.set_limit("m", requests_per_minute=2)
    started = [runner.submit(AGENT, f"t{n}") for n in range(3)]
    later = runner.submit(AGENT, "later", delay=3600)
    began = clock.time()
    drain(store, clock, concurrency=4)
    assert [runner.get(run_id).stop_reason for run_id in started] == ["final"] * 3
    assert runner.row(later).status is RunStatus.QUEUED and runner.row(later).lease_epoch == 0
    assert clock.time() - began >= 4 * 60  # nine calls, two a minute: paced by the limit
    assert runner.limits()[0].waiting == 0


def test_a_retry_after_backs_off_the_limit_for_every_run() -> None:
    def crowded(transcript: list[dict[str, Any]]) -> Any:
        raise ModelRetryable("429 Too Many Requests", retry_after=20)

    runner, store, clock = memory_runner()
    runner.set_limit("m", requests_per_minute=100)
    told = runner.run(Agent(FunctionModel(crowded), limit="m"), "a", model_retries=0)
    assert told.stop_reason == "model_error"
    [info] = runner.limits()
    assert info.backoff_until is not None and (info.requests, info.tokens) == (1, 0)
    # Another run of the limit does not call the provider before the 20 s are over: it parks.
    other = Agent(ScriptedModel(["x"]), ref="x:y", limit="m")
    run_id = runner.submit(other, "b")
    claim = store.claim_run(run_id, lease_seconds=LEASE, max_resumes=3)
    with pytest.raises(RunParked) as parked:
        store.run_limits(run_id, claim.epoch).reserve("m", 10)
    assert parked.value.until == pytest.approx(clock.time() + 20)


def test_a_limit_that_is_not_set_never_makes_the_estimate() -> None:
    # An adapter draws from provider/model whether or not that limit is set: the estimate
    # (the whole prompt as JSON) is made only for a limit that is.
    runner, store, _clock = memory_runner()
    run_id = runner.submit(Agent(ScriptedModel(["x"]), ref="x:y"), "a")
    claim = store.claim_run(run_id, lease_seconds=LEASE, max_resumes=3)
    made: list[int] = []

    def estimate() -> int:
        made.append(1)
        return 10

    limits = store.run_limits(run_id, claim.epoch)
    assert limits.reserve("openai/unset", estimate).id is None
    assert made == []
    runner.set_limit("openai/unset", tokens_per_minute=1_000)
    assert limits.reserve("openai/unset", estimate).tokens == 10
    assert made == [1]


def test_remove_a_limit() -> None:
    runner, _store, _clock = memory_runner()
    runner.set_limit("m", concurrency=1)
    runner.remove_limit("m")
    assert runner.limits() == []
    with pytest.raises(LimitNotFound):
        runner.remove_limit("m")


def test_each_model_call_span_names_its_limit_and_how_long_it_waited() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runner, _store, _clock = memory_runner(tracer_provider=provider)
    runner.set_limit("m", requests_per_minute=2)
    assert runner.run(AGENT, "add").stop_reason == "final"
    provider.shutdown()
    calls = [
        s for s in exporter.get_finished_spans() if s.attributes and "runner.limit" in s.attributes
    ]
    assert [s.attributes["runner.limit"] for s in calls] == ["m", "m", "m"]  # type: ignore[index]
    waited = [s.attributes["runner.limit.waited_seconds"] for s in calls]  # type: ignore[index]
    assert waited[:2] == [0.0, 0.0] and waited[2] > 50


def test_a_run_cancelled_while_parked_leaves_the_line() -> None:
    runner, store, clock = memory_runner()
    runner.set_limit("m", requests_per_minute=1)
    first, second = runner.submit(AGENT, "a"), runner.submit(AGENT, "b")
    with serving(store):
        # One call a minute: both wait in line for their next.
        wait_until(lambda: runner.limits()[0].waiting == 2, what="both runs in line")
    parked = second
    runner.cancel(parked)
    assert runner.limits()[0].waiting == 1
    drain(store, clock)
    assert not [pair for pair in store.limit_waiters if pair[1] == parked]
    assert runner.get(first).stop_reason == "final"


# The slow call's two signals: it began; it may end.
SLOW_CALL = (threading.Event(), threading.Event())


def one_call(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """One model call, the answer; the task `slow`'s call lasts until SLOW_CALL says."""
    if transcript[0]["content"] == "slow":
        entered, release = SLOW_CALL
        entered.set()
        release.wait(scaled(60))
    return {**final("done"), "usage": 10}


LIMITED = Agent(FunctionModel(one_call), {}, limit="m")
UNLIMITED = Agent(FunctionModel(one_call), {})


def test_runs_waiting_for_a_slot_sleep_while_the_call_lasts_and_its_end_wakes_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker, a limit of one call at a time, a slow call and four runs in line: 20 s of
    the slow call claim none of them again (each parks once), and its end wakes them in turn,
    each claimed once more to make its call, without the clock moving again."""
    entered, release = SLOW_CALL
    entered.clear(), release.clear()
    runner, store, clock = memory_runner()
    runner.set_limit("m", concurrency=1)
    worker = Worker(store=store, concurrency=8, poll=0.05, lease_seconds=LEASE)
    serving = threading.Thread(target=worker.serve)
    try:
        with caplog.at_level(logging.INFO, logger="runner.worker"):
            serving.start()
            slow = runner.submit(LIMITED, "slow")
            wait_until(entered.is_set, what="the slow call")
            line = [runner.submit(LIMITED, f"t{n}") for n in range(4)]
            wait_until(lambda: runner.limits()[0].waiting == 4, what="four runs in line")
            clock.advance(20)
            # A run no limit holds back, claimed after any due run: once it finished, the
            # worker has looked at the queue since the 20 s passed.
            looked = runner.submit(UNLIMITED, "look")
            wait_until(lambda: runner.row(looked).status is RunStatus.FINISHED, what="a look")
            assert [runner.row(run_id).lease_epoch for run_id in line] == [1, 1, 1, 1]
            release.set()
            wait_until(
                lambda: all(runner.row(r).status is RunStatus.FINISHED for r in [slow, *line]),
                what="every run finished",
            )
    finally:
        release.set()
        worker.stopping.set()
        worker._wake.set()
        serving.join()
    assert [runner.row(run_id).lease_epoch for run_id in line] == [2, 2, 2, 2]
    parked = [r for r in caplog.records if "parked" in r.getMessage()]
    assert len(parked) == 4
