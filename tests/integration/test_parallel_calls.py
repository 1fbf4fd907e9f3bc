"""Durable steps of several tool calls, on SQLite and PostgreSQL: one row per call, committed
together before any runs, each outcome committed as its call ends, settled per call after a
crash (simulated in-process: a `Crash` escaping a tool stands in for SIGKILL)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from runner import NOT_APPLIED, Agent, LeaseLost, ReplayMismatch, Runner, run_agent, tool
from runner.cli.run_output import render_run
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.sql import leases
from runner.testing import FunctionModel

from .support import Crash, Transcript, crash, died_with, fields

WAIT = 10.0


def batch_then_answer(*calls: dict[str, Any]) -> FunctionModel:
    """Step 1 asks for `calls` at once (with text), step 2 answers with their results."""

    def model(transcript: Transcript) -> dict[str, Any]:
        if len(transcript) == 1:
            return {"type": "tool", "calls": list(calls), "text": "All at once.", "usage": 30}
        results = [m["content"] for m in transcript if m["role"] == "tool"]
        return {"type": "final", "content": " | ".join(results), "usage": 5}

    return FunctionModel(model)


CALLS = (
    {"id": "call_a", "name": "first", "args": {"n": 1}},
    {"id": "call_b", "name": "second", "args": {"n": 2}},
    {"id": "call_c", "name": "nope", "args": {}},
)


def reversed_tools() -> dict[str, Callable[..., Any]]:
    """`first` ends only after `second` has: the journal gets their outcomes reversed."""
    second_done = threading.Event()

    def first(n: int) -> str:
        assert second_done.wait(WAIT)
        return f"first {n}"

    def second(n: int) -> str:
        second_done.set()
        return f"second {n}"

    return {"first": first, "second": second}


def rows(runner: Runner, run_id: str) -> list[dict[str, Any]]:
    with runner.engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT seq, step, kind, tool, content, idempotency_key, call_id, usage_tokens,"
                " attempt, is_error, tokens FROM entries WHERE run_id = :id ORDER BY seq"
            ),
            {"id": run_id},
        )
        return [dict(row._mapping) for row in found]


def tool_calls(runner: Runner, run_id: str) -> list[dict[str, Any]]:
    with runner.engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT step, tool, idempotency_key, call_id, status, attempt, result"
                " FROM tool_calls WHERE run_id = :id ORDER BY idempotency_key"
            ),
            {"id": run_id},
        )
        return [dict(row._mapping) for row in found]


def test_one_row_per_call_and_the_transcript_of_run_agent(db_url: str) -> None:
    expected = run_agent(batch_then_answer(*CALLS), reversed_tools(), "go")
    with Runner(db_url) as runner:
        result = runner.run(Agent(batch_then_answer(*CALLS), reversed_tools()), "go", id="p1")
        assert fields(result) == fields(expected)
        assert runner.get("p1").transcript == result.transcript
        journal = rows(runner, "p1")
    assert result.output == "first 1 | second 2 | LookupError: unknown tool nope"
    assert [(r["kind"], r["tool"], r["idempotency_key"], r["call_id"]) for r in journal[1:4]] == [
        ("action", "first", "p1-1.1", "call_a"),
        ("action", "second", "p1-1.2", "call_b"),
        ("action", "nope", "p1-1.3", "call_c"),
    ]
    # The outcomes are journaled as the calls ended (`first` waited for `second`), each with
    # its call's key and id.
    outcomes = [(r["kind"], r["tool"], r["idempotency_key"], r["call_id"]) for r in journal[4:7]]
    assert sorted(outcomes) == [
        ("observation", "first", "p1-1.1", "call_a"),
        ("observation", "nope", "p1-1.3", "call_c"),
        ("observation", "second", "p1-1.2", "call_b"),
    ]
    keys = [key for _, _, key, _ in outcomes]
    assert keys.index("p1-1.2") < keys.index("p1-1.1")
    # The text and the model call's usage are on the step's first row only.
    assert [(r["content"], r["usage_tokens"]) for r in journal[1:4]] == [
        ("All at once.", 30),
        (None, 0),
        (None, 0),
    ]
    assert {r["tokens"] for r in journal[1:7]} == {30}  # the step's counters, on every row
    # ... and the transcript shows them in call order, each observation naming its call.
    assert [m.get("id") for m in result.transcript[2:5]] == ["call_a", "call_b", "call_c"]


@contextmanager
def commits_and_inserts(runner: Runner) -> Iterator[list[int]]:
    """[commits, journal inserts] while the block runs."""
    counts = [0, 0]

    def on_commit(_connection: Any) -> None:
        counts[0] += 1

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.lstrip().startswith(("INSERT INTO entries", "WITH")):
            counts[1] += 1

    event.listen(runner.engine, "commit", on_commit)
    event.listen(runner.engine, "before_cursor_execute", on_statement)
    try:
        yield counts
    finally:
        event.remove(runner.engine, "commit", on_commit)
        event.remove(runner.engine, "before_cursor_execute", on_statement)


def test_the_calls_commit_together_then_each_outcome_alone(db_url: str) -> None:
    calls = [{"name": "echo", "args": {"i": i}} for i in range(4)]
    agent = Agent(batch_then_answer(*calls), {"echo": lambda i: i})
    with Runner(db_url, lease_seconds=600) as runner, commits_and_inserts(runner) as counts:
        result = runner.run(agent, "go")
    assert result.output == "0 | 1 | 2 | 3"
    # Create the run claimed with its task (one commit); ONE commit (and one fenced INSERT)
    # for the four calls, one commit per outcome; the answer.
    assert counts == [1 + 1 + 4 + 1, 1 + 1 + 4 + 1]


def test_tool_calls_pairs_every_call_with_its_own_outcome(db_url: str) -> None:
    with Runner(db_url) as runner:
        runner.run(Agent(batch_then_answer(*CALLS), reversed_tools()), "go", id="v1")
        found = tool_calls(runner, "v1")
    assert found == [
        {
            "step": 1,
            "tool": "first",
            "idempotency_key": "v1-1.1",
            "call_id": "call_a",
            "status": "done",
            "attempt": 1,
            "result": "first 1",
        },
        {
            "step": 1,
            "tool": "second",
            "idempotency_key": "v1-1.2",
            "call_id": "call_b",
            "status": "done",
            "attempt": 1,
            "result": "second 2",
        },
        {
            "step": 1,
            "tool": "nope",
            "idempotency_key": "v1-1.3",
            "call_id": "call_c",
            "status": "failed",
            "attempt": 1,
            "result": "LookupError: unknown tool nope",
        },
    ]


class Ledger:
    """Tools whose every invocation is counted. When `crashing`, all four start together,
    then every one but `quick` dies (as SIGKILL would) once `quick` has returned."""

    def __init__(self, *, crashing: bool) -> None:
        self.crashing = crashing
        self.ran: list[tuple[str, int, str]] = []
        self.reconciled: list[str] = []
        self.all_started = threading.Barrier(4, timeout=WAIT)
        self.quick_done = threading.Event()
        self.lock = threading.Lock()

    def start(self, name: str, key: str, attempt: int) -> None:
        self.log(name, key, attempt)
        if self.crashing:
            self.all_started.wait()

    def log(self, name: str, key: str, attempt: int) -> None:
        with self.lock:
            self.ran.append((name, attempt, key))

    def tools(self) -> dict[str, Callable[..., Any]]:
        ledger = self

        def current() -> tuple[str, int]:
            from runner import current_call

            call = current_call()
            assert call is not None
            return call.idempotency_key, call.attempt

        def die_first_time(name: str) -> None:
            key, attempt = current()
            ledger.start(name, key, attempt)
            if ledger.crashing:
                assert ledger.quick_done.wait(WAIT)
                raise Crash

        @tool
        def quick(x: int) -> str:
            key, attempt = current()
            ledger.start("quick", key, attempt)
            ledger.quick_done.set()
            return f"quick {x}"

        @tool(idempotent=True)
        def pure(x: int) -> str:
            die_first_time("pure")
            return f"pure {x}"

        @tool
        def plain(x: int) -> str:
            die_first_time("plain")
            return f"plain {x}"

        def check(key: str, args: dict[str, Any]) -> Any:
            ledger.reconciled.append(key)
            return NOT_APPLIED

        @tool(reconcile=check)
        def checked(x: int) -> str:
            die_first_time("checked")
            return f"checked {x}"

        return {"quick": quick, "pure": pure, "plain": plain, "checked": checked}


BATCH = tuple(
    {"id": f"c{n}", "name": name, "args": {"x": n}}
    for n, name in enumerate(["quick", "pure", "plain", "checked"], 1)
)


def test_a_crash_mid_batch_settles_each_unfinished_call_and_reruns_no_finished_one(
    db_url: str,
) -> None:
    model = batch_then_answer(*BATCH)
    dying = Ledger(crashing=True)
    with Runner(db_url) as runner:
        with pytest.raises(Crash):
            runner.run(Agent(model, dying.tools()), "go", id="mid")
        # Every call started; only quick ended, and only its outcome is journaled.
        assert sorted(name for name, _, _ in dying.ran) == ["checked", "plain", "pure", "quick"]
        statuses = {row["tool"]: row["status"] for row in tool_calls(runner, "mid")}
        assert statuses == {
            "quick": "done",
            "pure": "pending",
            "plain": "pending",
            "checked": "pending",
        }
        shown = render_run(runner.get("mid"), runner.row("mid")).splitlines()
        assert shown[-9:] == [
            "  said: All at once.",
            '  -> quick({"x": 1})',
            '  -> pure({"x": 2})',
            '  -> plain({"x": 3})',
            '  -> checked({"x": 4})',
            "  <- quick [ok]  quick 1",
            "  .. pure: no result yet (running, or a resume will settle it)",
            "  .. plain: no result yet (running, or a resume will settle it)",
            "  .. checked: no result yet (running, or a resume will settle it)",
        ]
        crash(runner.engine, "mid")

        resumed = Ledger(crashing=False)
        result = runner.resume("mid", agent=Agent(model, resumed.tools()))
        found = {row["tool"]: row for row in tool_calls(runner, "mid")}
    assert model.calls == 2  # step 1 was never asked for again
    # quick is never run again; pure re-runs with its key (attempt 2); plain is not run;
    # checked's hook is asked first, says it never happened, so it runs (attempt 2).
    assert sorted(resumed.ran) == [("checked", 2, "mid-1.4"), ("pure", 2, "mid-1.2")]
    assert resumed.reconciled == ["mid-1.4"]
    assert result.stop_reason == "final"
    outcomes = [m["content"] for m in result.transcript if m["role"] == "tool"]
    assert outcomes[0] == "quick 1" and outcomes[1] == "pure 2" and outcomes[3] == "checked 4"
    assert outcomes[2].startswith("OutcomeUnknown: plain was interrupted before its outcome")
    assert {name: (row["status"], row["attempt"]) for name, row in found.items()} == {
        "quick": ("done", 1),
        "pure": ("done", 2),
        "plain": ("unknown", 2),
        "checked": ("done", 2),
    }


def test_a_batch_recorded_in_full_is_not_run_again(db_url: str) -> None:
    calls = [{"name": "count", "args": {"i": i}} for i in range(3)]
    ran: list[int] = []
    model = batch_then_answer(*calls)
    agent = Agent(model, {"count": lambda i: ran.append(i) or i})
    with Runner(db_url) as runner:
        first = runner.run(agent, "go", id="full")
        # Cut the run back to the moment after its last outcome was committed.
        with runner.engine.begin() as connection:
            connection.execute(text("DELETE FROM entries WHERE run_id = 'full' AND kind = 'final'"))
            connection.execute(
                text("UPDATE runs SET status = 'running', stop_reason = NULL WHERE id = 'full'")
            )
        crash(runner.engine, "full")
        again = runner.resume("full", agent=agent)
    assert sorted(ran) == [0, 1, 2]
    assert model.calls == 3  # the answer again, never the batch
    assert again.transcript == first.transcript


def test_a_batch_that_lost_its_lease_writes_no_outcome(db_url: str) -> None:
    holder: dict[str, Runner] = {}

    def taken_over() -> str:
        # Another worker steals the run while this call runs.
        leases.claim_run(
            holder["runner"].engine,
            "lost",
            owner="thief:1:1",
            lease_seconds=600,
            max_resumes=3,
            steal=True,
        )
        return "done"

    model = batch_then_answer({"name": "taken_over", "args": {}}, {"name": "other", "args": {}})
    agent = Agent(model, {"taken_over": taken_over, "other": lambda: "other"}, max_parallel_tools=1)
    with Runner(db_url) as runner:
        holder["runner"] = runner
        with pytest.raises(LeaseLost):
            runner.run(agent, "go", id="lost")
        kinds = [row["kind"] for row in rows(runner, "lost")]
    assert kinds == ["task", "action", "action"]  # fenced out: neither outcome written


def test_an_outcome_for_none_of_the_steps_calls_is_a_replay_mismatch(db_url: str) -> None:
    counters = Counters(steps=1)
    calls = [
        Entry(
            EntryKind.ACTION,
            1,
            counters,
            action_type="tool",
            tool="echo",
            args={"i": n},
            idempotency_key=f"mm-1.{n}",
        )
        for n in (1, 2)
    ]
    stray = Entry(
        EntryKind.OBSERVATION, 1, counters, content="?", tool="echo", idempotency_key="mm-1.9"
    )
    model = batch_then_answer(
        {"name": "echo", "args": {"i": 1}}, {"name": "echo", "args": {"i": 2}}
    )
    with Runner(db_url) as runner:
        died_with(runner.engine, "mm", "go", [*calls, stray])
        with pytest.raises(ReplayMismatch, match=r"key mm-1\.9"):
            runner.resume("mm", agent=Agent(model, {"echo": lambda i: i}))
    assert model.calls == 0


def test_a_step_of_very_many_calls_is_still_one_commit_before_any_runs(db_url: str) -> None:
    # More calls than one statement writes (64): several fenced INSERTs, one transaction.
    calls = [{"id": f"c{i}", "name": "echo", "args": {"i": i}} for i in range(150)]
    agent = Agent(batch_then_answer(*calls), {"echo": lambda i: i}, max_repeats=None)
    with Runner(db_url, lease_seconds=600) as runner, commits_and_inserts(runner) as counts:
        result = runner.run(agent, "go", id="many")
        journal = rows(runner, "many")
    # The run of a new id created claimed with its task (one commit), as a run with no id;
    # ONE commit (three fenced INSERTs) for the 150 calls, one per outcome; the answer.
    assert counts == [1 + 1 + 150 + 1, 1 + 3 + 150 + 1]
    assert result.output == " | ".join(str(i) for i in range(150))
    actions = [r for r in journal if r["kind"] == "action"]
    assert [r["idempotency_key"] for r in actions] == [f"many-1.{n}" for n in range(1, 151)]
    assert [r["seq"] for r in actions] == list(range(1, 151))
    assert [r["call_id"] for r in actions] == [f"c{i}" for i in range(150)]
