"""The store's contract: the same scenarios on the in-memory store (runner.testing) and on
both databases give the same outcomes, so the fake that the unit tests run on cannot drift
from the SQL unseen.

Each scenario drives a `Runner` and its store's protocol (runner.store.protocol) on a
`ManualClock`, and returns what a user could observe: rows, journals (with the epochs that
wrote them), queues, and each refusal's type and message. It runs once on an
`InMemoryStore` and once on the database of `db_url`, and the two must be equal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from runner import Agent, Runner, ask_human, current_call, tool
from runner.core.clock import ManualClock
from runner.errors import RunnerError
from runner.service.worker import Worker
from runner.sql import limits as sql_limits
from runner.store.releases import OlderReleases, Releases
from runner.store.rows import new_run
from runner.testing import FunctionModel, InMemoryStore, ScriptedModel, call, final, tool_results

from .agents import SOLVER_REF

START = 1_800_000_000.0
ELSEWHERE = "another-host.example:4242:123"
Outcome = list[Any]
Scenario = Callable[[Runner, ManualClock, Outcome], None]


@contextmanager
def on_memory() -> Iterator[tuple[Runner, ManualClock]]:
    clock = ManualClock(START)
    with Runner(store=InMemoryStore(clock=clock), lease_seconds=30) as runner:
        yield runner, clock


@contextmanager
def on_database(url: str) -> Iterator[tuple[Runner, ManualClock]]:
    clock = ManualClock(START)
    with Runner(url, clock=clock, lease_seconds=30) as runner:
        yield runner, clock


def outcomes(scenario: Scenario, db_url: str) -> tuple[Outcome, Outcome]:
    memory: Outcome = []
    database: Outcome = []
    with on_memory() as (runner, clock):
        scenario(runner, clock, memory)
    with on_database(db_url) as (runner, clock):
        scenario(runner, clock, database)
    return memory, database


def seen(runner: Runner, *run_ids: str) -> list[Any]:
    """What a user sees of runs: their rows and their journals, times relative to START."""

    def since(value: Any) -> Any:
        return None if value is None else round(value.timestamp() - START, 3)

    found = []
    for run_id in run_ids:
        row = runner.row(run_id)
        found.append(
            (
                row.id, str(row.status), row.state, row.stop_reason and str(row.stop_reason),
                row.output, row.error, row.lease_owner, row.lease_epoch,
                since(row.lease_expires_at), row.resumes, row.queue, row.priority,
                since(row.not_before), row.steps,
                row.budgets, row.cancel_requested, since(row.deadline), since(row.waiting_since),
                since(row.wait_expires_at), row.forked_from_id, row.forked_at_step,
            )
        )  # fmt: skip
        found.append(
            [
                (
                    str(entry.kind), entry.step, entry.tool, entry.args, entry.content,
                    epoch, entry.idempotency_key, entry.answer and str(entry.answer),
                    entry.answered_by, entry.attempt, entry.counters,
                )
                for entry, epoch in runner.store.load_entries(run_id)
            ]
        )  # fmt: skip
    return found


def refused(outcome: Outcome, action: Callable[[], Any]) -> None:
    """Record what `action` raised (its type and message), or that it did not."""
    try:
        action()
    except (RunnerError, ValueError) as exc:
        outcome.append((type(exc).__name__, str(exc)))
    else:
        outcome.append("accepted")


def claims(runner: Runner, limit: int, owner: str = "tester:1:1", **kwargs: Any) -> list[Any]:
    taken = runner.store.claim_some(
        limit=limit, owner=owner, lease_seconds=30, max_resumes=2, **kwargs
    )
    return [(c.run.id, c.epoch, c.next_seq, c.stalled, c.crash_loop) for c in taken]


# -- the scenarios ------------------------------------------------------------------------------


def claiming(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """Priorities, queues served, a limit, a delay, a suspect taken alone, crash_loop."""
    runner.set_queue_limit("small", 2)
    for run_id, queue, priority in [
        ("a", "default", 0), ("b", "default", 5), ("c", "small", 1), ("d", "small", 1),
        ("e", "small", 1), ("f", "other", 9),
    ]:  # fmt: skip
        runner.submit(SOLVER_REF, f"task {run_id}", id=run_id, queue=queue, priority=priority)
        clock.advance(0.01)
    runner.submit(SOLVER_REF, "later", id="later", delay=60, priority=100)
    outcome.append(claims(runner, 3, queues=["small", "default"]))
    outcome.append(claims(runner, 10))
    outcome.append([(q.name, q.limit, q.queued, q.delayed, q.running, q.waiting)
                    for q in runner.queues()])  # fmt: skip
    runner.store.release_run("c", 1)
    outcome.append(claims(runner, 10, owner=ELSEWHERE))
    clock.advance(61)  # every lease expired, the delay passed
    outcome.append(claims(runner, 10))  # a suspect first: alone
    outcome.append(claims(runner, 10, suspects=False))
    for _ in range(3):
        clock.advance(31)
        outcome.append(claims(runner, 1, skip_agents=["not/this.py:agent"]))
    refused(outcome, lambda: runner.store.claim_run("b", lease_seconds=30, max_resumes=2))
    outcome.append(seen(runner, "a", "b", "c", "d", "e", "f", "later"))


def creating_claimed(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """A run inserted and claimed at once (`Runner.run`'s); an id taken: nothing written."""
    at = datetime.fromtimestamp(START, UTC)
    row = new_run(
        run_id="fresh", agent=SOLVER_REF, agent_name="solver", release="1", task="a task",
        budgets={"max_steps": 3, "max_seconds": 60}, at=at,
    )  # fmt: skip
    for _ in range(2):
        claim = runner.store.create_claimed(row, lease_seconds=30, max_resumes=2)
        outcome.append(claim and (claim.run.id, claim.epoch, claim.next_seq, claim.stalled))
    outcome.append(seen(runner, "fresh"))
    refused(outcome, lambda: runner.store.claim_run("fresh", lease_seconds=30, max_resumes=2))


def answering(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """Waits, bad answers, approve, deny, reply, a timeout and a cancel."""

    @tool(approval=lambda args: args["amount"] > 100)
    def refund(amount: int, idempotency_key: str) -> str:
        running = current_call()
        return f"refunded {amount} as {idempotency_key} attempt {running and running.attempt}"

    model = FunctionModel(
        lambda t: (
            final(tool_results(t)[-1]["content"]) if tool_results(t) else call("refund", amount=250)
        )
    )
    shop = Agent(model, {"refund": refund}, name="shop", release="1")
    asker = Agent(
        ScriptedModel([call("ask_human", question="Colour?"), lambda t: final(str(t[-1]))]),
        {"ask_human": ask_human},
    )
    for run_id in ("ok", "no", "late", "gone"):
        outcome.append(runner.run(shop, "refund", id=run_id, approval_timeout=60).status)
    runner.run(asker, "paint", id="ask")
    refused(outcome, lambda: runner.reply("ok", "yes"))
    refused(outcome, lambda: runner.approve("ok", call="ok-9"))
    refused(outcome, lambda: runner.deny("ok", reason=" "))
    refused(outcome, lambda: runner.approve("ask"))
    refused(outcome, lambda: runner.approve("ok", note="fine", by="ann"))
    refused(outcome, lambda: runner.approve("ok", by="bob"))
    refused(outcome, lambda: runner.deny("no", reason="too much", by="bob"))
    refused(outcome, lambda: runner.reply("ask", "blue", by="cy"))
    outcome.append(runner.cancel("gone").stop_reason)

    def cancels_itself(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        runner.cancel("mid")  # after the loop's check: only the wait's write can see it
        return call("refund", amount=500)

    outcome.append(runner.run(Agent(cancels_itself, {"refund": refund}), "r", id="mid").status)
    refused(outcome, lambda: runner.approve("gone"))
    outcome.append(sorted(runner.waits(runner.list())))
    clock.advance(61)
    refused(outcome, lambda: runner.approve("late"))
    for run_id in ("ok", "no", "late", "ask"):
        outcome.append(runner.resume(run_id, agent=asker if run_id == "ask" else shop).output)
    outcome.append(seen(runner, "ok", "no", "late", "gone", "ask", "mid"))


def reviving(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """A budget stop revived, an unfinished run extended, forks with and without changes."""
    counter = FunctionModel(
        lambda t: (
            final(f"found {len(tool_results(t))}")
            if len(tool_results(t)) >= 3
            else {**call("search", q=len(tool_results(t))), "usage": 10}
        )
    )
    agent = Agent(counter, {"search": lambda q: f"result {q}"}, name="c", ref="x:counter")
    outcome.append(runner.run(agent, "t", id="r", max_steps=2).stop_reason)
    refused(outcome, lambda: runner.revive("r", max_steps=2))
    refused(outcome, lambda: runner.fork("r", 2))
    outcome.append(runner.revive("r", max_steps=6).status)
    clock.advance(5)
    outcome.append(runner.resume("r", agent=agent).output)
    refused(outcome, lambda: runner.revive("r", max_steps=9))
    runner.submit(agent, "u", id="u", max_steps=3)
    refused(outcome, lambda: runner.resume("u", agent=agent, max_steps=0))
    outcome.append(runner.resume("u", agent=agent, max_steps=9, max_seconds=100).output)
    outcome.append(runner.fork("r", 1, id="f1"))
    outcome.append(runner.fork("r", 2, id="f2", max_steps=7))
    refused(outcome, lambda: runner.fork("r", 2, id="f1"))
    refused(outcome, lambda: runner.fork("r", 4))
    outcome.append(runner.resume("f2", agent=agent).output)
    outcome.append(seen(runner, "r", "u", "f1", "f2"))


def serving(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """A worker drains the queue (on the store's clock, which a worker never moves)."""
    for i in range(4):
        runner.submit(SOLVER_REF, f"t{i}", id=f"w{i}", priority=i)
    worker = Worker(store=runner.store, concurrency=2, once=True, poll=0.01)
    worker.runner.observer = None
    worker.serve()
    outcome.append(worker.finished)
    outcome.append(sorted((r.id, str(r.status), r.output, r.steps) for r in runner.list()))


def reading_events(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """A journal read as events: after a position, a page at a time, a follow that ends."""
    runner.submit(SOLVER_REF, "t", id="ev")
    worker = Worker(store=runner.store, concurrency=1, once=True, poll=0.01)
    worker.runner.observer = None
    worker.serve()
    for after in (-1, 0, 2, 99):
        events = runner.events("ev", after=after)
        outcome.append([(e.position, str(e.entry.kind), e.entry.content) for e in events])
    outcome.append([e.position for e in runner.events("ev", after=1, follow=True)])
    outcome.append([position for position, _ in runner.store.entries_after("ev", 0, 2)])


def scheduling(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """Ticks fired on time, an overlap skipped, a late tick caught up once or skipped, a
    pause, a schedule removed and added again (its tick's run exists)."""

    def fired(at: float) -> list[Any]:
        done = runner.fire_schedules(datetime.fromtimestamp(START + at, UTC))
        return [(f.schedule, f.tick.timestamp() - START, f.run_id, f.skipped) for f in done]

    runner.add_schedule("each", SOLVER_REF, "tick", cron="* * * * *")
    runner.add_schedule("late", SOLVER_REF, "tick", cron="* * * * *", catch_up="skip")
    runner.add_schedule("both", SOLVER_REF, "tick", cron="* * * * *", overlap="allow")
    outcome.append(runner.store.next_tick() == runner.schedule("each").next_tick_at)
    outcome.append(fired(1))  # nothing due yet
    outcome.append(fired(61))  # each fires; its run still queued
    outcome.append(fired(121))  # each and late: overlap skipped; both: a second run
    outcome.append(fired(400))  # every tick late: late skips, each runs the last once
    runner.pause_schedule("both")
    outcome.append(fired(470))
    runner.resume_schedule("both")
    runner.remove_schedule("each")
    runner.add_schedule("each", SOLVER_REF, "tick", cron="* * * * *", overlap="allow")
    clock.advance(1)
    outcome.append(fired(400))  # no tick due: a resumed schedule starts after now
    outcome.append([(s.name, s.paused, s.last_run_id, s.last_skip) for s in runner.schedules()])
    outcome.append(sorted((r.id, str(r.status), r.queue) for r in runner.list(limit=50)))


def retaining(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """Rules by age and by count, the default `*`, a queue's own rule over it, a run not
    finished kept, bad rules refused."""
    for queue in ("default", "kept", "aged"):
        for i in range(4):
            runner.submit(SOLVER_REF, f"{queue} {i}", id=f"{queue}{i}", queue=queue)
            runner.resume(f"{queue}{i}")
            clock.advance(10)
    runner.submit(SOLVER_REF, "open", id="open", queue="aged")
    runner.set_retention("*", keep_runs=2)
    runner.set_retention("kept", keep_runs=3)
    runner.set_retention("aged", keep=25)
    refused(outcome, lambda: runner.set_retention("kept", keep_runs=-1))
    refused(outcome, lambda: runner.set_retention("bad name!", keep=1))
    pruned = runner.prune_expired()
    outcome.append((pruned.runs, sorted(pruned.queues.items())))
    outcome.append(sorted(r.id for r in runner.list(limit=50)))
    runner.set_retention("*", keep_runs=0)
    pruned = runner.prune_expired()
    outcome.append((pruned.runs, sorted(pruned.queues.items())))
    outcome.append(sorted(r.id for r in runner.list(limit=50)))
    refused(outcome, lambda: runner.row("default0"))


def releasing(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """A queue's policy for older releases at claim time (a given release, one learnt from
    the agents loaded, a drain), a failed check's parking, and each release's runs."""
    runner.set_older_releases("pinned", "pin")
    runner.set_older_releases("checked", OlderReleases.CHECK)
    model = FunctionModel(lambda t: final("done"))

    def agent(release: str, ref: str = "x:refunds") -> Agent:
        return Agent(model, {}, name=ref[2:], release=release, ref=ref)

    for run_id, made, queue in [
        ("p1", agent("1"), "pinned"), ("c1", agent("1"), "checked"), ("d1", agent("1"), "default"),
        ("p2", agent("2"), "pinned"), ("o1", agent("1", "y:other"), "pinned"),
    ]:  # fmt: skip
        runner.submit(made, f"task {run_id}", id=run_id, queue=queue)
        clock.advance(0.01)

    def taken(**kwargs: Any) -> list[Any]:
        found = runner.store.claim_some(
            limit=10, owner="tester:1:1", lease_seconds=30, max_resumes=2, **kwargs
        )
        return [(c.run.id, c.epoch, str(runner.store.queue_policy(c.run.queue))) for c in found]

    outcome.append(taken(releases=Releases("2")))  # p1 and o1 are release 1's, pinned
    outcome.append(runner.store.park_run("c1", 1, "check_failed", "differs at step 1"))
    outcome.append(runner.store.park_run("c1", 1, "check_failed", "twice"))  # no longer held
    outcome.append(runner.releases())
    outcome.append(taken(releases=Releases(None, {"x:refunds": "2"})))  # y:other not loaded
    outcome.append(taken(releases=Releases("1", only=True)))  # the drain: c1 (parked), p1
    outcome.append([(q.name, q.older_releases) for q in runner.queues()])
    outcome.append(seen(runner, "p1", "c1", "d1", "p2", "o1"))
    outcome.append(runner.row("c1").parked_reason)


def calling_long(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """A model call in flight past its minute (a slow model) holds its slot of a limit's
    concurrency while its lease lives, and its row outlives the sweep of old charges; its
    settle frees the slot, and a dead worker's call holds none once its lease is gone."""
    runner.set_limit("slow/model", concurrency=1)
    for run_id in ("a", "b", "c"):
        runner.submit(SOLVER_REF, f"task {run_id}", id=run_id)

    def claimed(run_id: str) -> Any:
        found = runner.store.claim_run(run_id, lease_seconds=600, max_resumes=5)
        assert found is not None
        return runner.store.run_limits(run_id, found.epoch)

    def in_use() -> list[Any]:
        return [(limit.requests, limit.in_flight, limit.waiting) for limit in runner.limits()]

    a_limits = claimed("a")
    first = a_limits.reserve("slow/model", 10)
    clock.advance(150)  # past the minute, its grace and the sweep's two minutes: a's lease lives
    refused(outcome, lambda: claimed("b").reserve("slow/model", 10))
    outcome.append(in_use())
    a_limits.settle(first, 20)  # wakes b, parked for the slot
    outcome.append(since_start(runner.row("b").not_before))
    outcome.append(claimed("b").reserve("slow/model", 10).tokens)
    clock.advance(601)  # b's worker died in its call: its lease is gone, and with it its slot
    outcome.append(claimed("c").reserve("slow/model", 10).tokens)
    outcome.append(in_use())


def settling_long(runner: Runner, clock: ManualClock, outcome: Outcome) -> None:
    """A model call that ran past its minute (a slow model) is charged its usage from its
    settle, however long ago it was reserved: its tokens and its request count against the
    limit's next minute, and its row outlives the sweep of old charges until that ends."""
    runner.set_limit("slow/model", tokens_per_minute=1000, requests_per_minute=2)
    for run_id in ("a", "b", "c", "d"):
        runner.submit(SOLVER_REF, f"task {run_id}", id=run_id)

    def claimed(run_id: str) -> Any:  # stolen: a call let through holds its run's lease
        found = runner.store.claim_run(run_id, lease_seconds=600, max_resumes=5, steal=True)
        assert found is not None
        return runner.store.run_limits(run_id, found.epoch)

    def in_use() -> list[Any]:
        return [(limit.tokens, limit.requests, limit.waiting) for limit in runner.limits()]

    a_limits = claimed("a")
    first = a_limits.reserve("slow/model", 10)
    clock.advance(100)  # the call ends 100 s on, past its minute and its grace
    a_limits.settle(first, 900)
    clock.advance(10)
    outcome.append(in_use())
    refused(outcome, lambda: claimed("b").reserve("slow/model", 200))  # 900 + 200 > 1000
    outcome.append(since_start(runner.row("b").not_before))  # the settle's minute and guard
    clock.advance(20)  # 130 s on: past the sweep's two minutes from the reservation
    refused(outcome, lambda: claimed("c").reserve("slow/model", 50))  # b is ahead in line
    outcome.append(in_use())
    clock.advance(32)  # 162 s on: the settle's minute is over
    refused(outcome, lambda: claimed("b").reserve("slow/model", 200))
    outcome.append(in_use())


def since_start(moment: datetime | None) -> float | None:
    return None if moment is None else round(moment.timestamp() - START, 3)


SCENARIOS = [
    claiming,
    creating_claimed,
    answering,
    reviving,
    serving,
    reading_events,
    scheduling,
    retaining,
    releasing,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_the_memory_store_and_the_database_agree(db_url: str, scenario: Scenario) -> None:
    memory, database = outcomes(scenario, db_url)
    assert memory == database
    assert memory  # the scenario observed something


def test_a_call_in_flight_past_its_minute_holds_its_slot(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_limits, "SWEEP_SECONDS", 0.0)  # every reservation sweeps
    memory, database = outcomes(calling_long, db_url)
    assert memory == database
    assert memory[0][0] == "RunParked"  # a second call while the first is in flight, 150 s on
    assert memory[1:] == [[(0, 1, 1)], 150.0, 10, 10, [(1, 1, 0)]]


def test_a_long_call_is_charged_from_its_settle(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_limits, "SWEEP_SECONDS", 0.0)  # every reservation sweeps
    memory, database = outcomes(settling_long, db_url)
    assert memory == database
    assert memory[0] == [(900, 1, 0)]  # 110 s after its reservation, 10 s after its settle
    assert memory[1][0] == memory[3][0] == "RunParked"
    assert memory[2] == 161.0  # settled at 100 s, counted for a minute and a guard
    assert memory[4:] == [[(900, 1, 2)], "accepted", [(200, 1, 1)]]
