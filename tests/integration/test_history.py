"""The run history on both databases: the documented queries, the views, read-only SQL,
the stop-reason statistics, export and prune, against seeded histories with known answers.

The seeded history is written row by row from a plain description (`Spec`), and every
expected answer is computed in Python from that description, never read back from SQL.
"""

from __future__ import annotations

import io
import json
import re
import statistics
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select, text

from runner import Agent, QueryFailed, tool
from runner.cli.run_output import render_run
from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.history import (
    export_runs,
    parse_moment,
    prune_runs,
    read_only_query,
    stop_reason_stats,
)
from runner.service.runner import Runner
from runner.sql import runs as store
from runner.sql.database import open_engine, upgrade
from runner.sql.schema import entries, runs
from tests.conditions import wait_until

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDE = DOCS / "guides" / "history.md"  # the queries, run here as written
SCHEMA = DOCS / "reference" / "schema.md"  # every table, view and column
BASE = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
PER_TOKEN = 1 / 1024  # a binary fraction: sums of costs are exact in any order


# -- the seeded history -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    tool: str
    outcome: str  # done, failed, unknown (told OutcomeUnknown), rerun (attempt 2), none
    seconds: float = 0.25


@dataclass
class Spec:
    id: str
    agent_name: str | None
    release: str | None
    stop_reason: str | None  # None: not finished
    day: int
    calls: list[Call] = field(default_factory=list)
    usage: int = 128  # tokens per model call
    resumes: int = 0
    status: str = "finished"
    minute: int = 0

    @property
    def created_at(self) -> datetime:
        return BASE + timedelta(days=self.day, minutes=self.minute)

    @property
    def model_calls(self) -> int:
        closing = self.stop_reason in ("final", "repeated_call", "token_budget")
        return len(self.calls) + (1 if closing else 0)

    @property
    def tokens(self) -> int:
        return self.usage * self.model_calls

    @property
    def cost(self) -> float:
        return self.tokens * PER_TOKEN


def _history() -> list[Spec]:
    ok, slow = Call("search", "done"), Call("fetch", "done", 1.5)
    specs: list[Spec] = []

    def add(agent: str | None, release: str | None, reasons: dict[str, int], day: int) -> None:
        for reason, n in reasons.items():
            for _ in range(n):
                i = len(specs)
                calls = [ok, slow][: 1 + i % 2]
                if reason == "tool_errors":
                    calls = [Call("send_email", "failed"), Call("send_email", "failed", 0.5)]
                elif reason == "max_steps":
                    calls = [ok, Call("fetch", "failed"), slow]
                spec = Spec(f"run-{i:03d}", agent, release, reason, day, calls, minute=i)
                spec.usage = 128 + 64 * (i % 3)
                specs.append(spec)

    add("support", "1.0", {"final": 6, "max_steps": 1, "repeated_call": 1}, 0)
    add("support", "1.1", {"final": 3, "max_steps": 3, "repeated_call": 1}, 1)
    add("coder", "2.0", {"final": 3, "tool_errors": 1}, 2)
    add(None, None, {"final": 1}, 0)
    # A crash interrupted two calls: one was re-run (idempotent), one was told "unknown".
    specs[0].resumes = 1
    specs[0].calls = [Call("search", "rerun", 2.0)]
    specs[8].resumes = 2
    specs[8].calls = [ok, Call("send_email", "unknown", 4.0)]
    # Given up while a call was in flight: the call never got an outcome.
    specs.append(
        Spec("run-gaveup", "coder", "2.0", "crash_loop", 2, [Call("send_email", "none")], 256, 4)
    )
    # Unfinished: one running with a call in flight, one queued that never started.
    specs.append(
        Spec("run-live", "support", "1.1", None, 2, [ok, Call("fetch", "none")], 64, 1, "running")
    )
    specs.append(Spec("run-queued", "coder", "2.0", None, 2, [], 64, 0, "queued"))
    return specs


HISTORY = _history()


def _journal(spec: Spec) -> Iterator[dict[str, Any]]:
    """The entries of one seeded run, in the shapes the loop writes."""
    at = spec.created_at + timedelta(seconds=1)
    seq, tokens, streak = 0, 0, 0

    def row(kind: str, step: int, **more: Any) -> dict[str, Any]:
        nonlocal seq
        values = {
            "run_id": spec.id,
            "seq": seq,
            "step": step,
            "kind": kind,
            "role": None,
            "content": None,
            "content_format": "text",
            "action_type": None,
            "tool": None,
            "args": None,
            "is_error": False,
            "error": None,
            "idempotency_key": None,
            "attempt": 1,
            "usage_tokens": 0,
            "usage_cost": 0.0,
            "steps": step,
            "tokens": tokens,
            "cost": tokens * PER_TOKEN,
            "error_streak": streak,
            "lease_epoch": 1,
            "created_at": at,
            **more,
        }
        seq += 1
        return values

    if spec.status == "queued":
        return
    yield row("task", 0, role="user", content=f"task of {spec.id}")
    for step, call in enumerate(spec.calls, start=1):
        at += timedelta(seconds=1)
        tokens += spec.usage
        key = f"{spec.id}-{step}"
        yield row(
            "action",
            step,
            role="assistant",
            action_type="tool",
            tool=call.tool,
            args={"q": step},
            idempotency_key=key,
            usage_tokens=spec.usage,
            usage_cost=spec.usage * PER_TOKEN,
        )
        if call.outcome == "none":
            continue
        at += timedelta(seconds=call.seconds)
        failed = call.outcome in ("failed", "unknown")
        streak = streak + 1 if failed else 0
        content = {
            "done": "found it",
            "rerun": "found it",
            "failed": "TimeoutError: no answer",
            "unknown": "OutcomeUnknown: send_email was interrupted before its outcome was recorded",
        }[call.outcome]
        yield row(
            "observation",
            step,
            role="tool",
            tool=call.tool,
            content=content,
            is_error=failed,
            idempotency_key=key,
            attempt=2 if call.outcome in ("rerun", "unknown") else 1,
        )
    closing = {"final": "final", "repeated_call": "refused", "token_budget": "refused"}
    if spec.stop_reason in closing:
        at += timedelta(seconds=1)
        tokens += spec.usage
        step = len(spec.calls) + 1
        yield row(
            closing[spec.stop_reason],
            step,
            role="assistant" if spec.stop_reason == "final" else None,
            action_type="final" if spec.stop_reason == "final" else "tool",
            content='{"answer": 42}' if spec.stop_reason == "final" else None,
            content_format="json" if spec.stop_reason == "final" else "text",
            usage_tokens=spec.usage,
            usage_cost=spec.usage * PER_TOKEN,
        )


def _finished_at(spec: Spec) -> datetime | None:
    if spec.status != "finished":
        return None
    journal = list(_journal(spec))
    return journal[-1]["created_at"] + timedelta(seconds=0.5)


def seed(engine: Engine, specs: list[Spec] = HISTORY) -> None:
    with engine.begin() as connection:
        for spec in specs:
            finished = spec.status == "finished"
            connection.execute(
                insert(runs).values(
                    id=spec.id,
                    agent=f"agents:{spec.agent_name}" if spec.agent_name else None,
                    agent_name=spec.agent_name,
                    release=spec.release,
                    task=f"task of {spec.id}",
                    budgets={"max_steps": 8},
                    status=spec.status,
                    stop_reason=spec.stop_reason,
                    output='{"answer": 42}' if spec.stop_reason == "final" else None,
                    output_format="json" if spec.stop_reason == "final" else None,
                    wrapped_up=False,
                    steps=spec.model_calls if finished else 0,
                    tokens=spec.tokens if finished else 0,
                    cost=spec.cost if finished else 0.0,
                    resumes=spec.resumes,
                    stalled_resumes=0,
                    progress_seq=0,
                    cancel_requested=False,
                    lease_owner="host:1:1" if spec.status == "running" else None,
                    lease_epoch=1,
                    created_at=spec.created_at,
                    updated_at=spec.created_at,
                    finished_at=_finished_at(spec),
                    root_id=spec.id,
                )
            )
            journal = list(_journal(spec))
            if journal:
                connection.execute(insert(entries), journal)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = open_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def seeded(db_url: str, engine: Engine) -> str:
    seed(engine)
    return db_url


def query(url: str, sql: str) -> list[dict[str, Any]]:
    with read_only_query(url, sql) as result:
        return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def number(value: Any) -> float:
    return float(value)  # PostgreSQL gives Decimal for numeric, SQLite float


# -- the documented queries --------------------------------------------------------------------


def doc_queries() -> dict[str, str]:
    found = {}
    for section in GUIDE.read_text().split("\n## ")[1:]:
        for sql in re.findall(r"```sql\n(.*?)```", section, re.S):
            found[section.splitlines()[0].strip()] = sql
    return found


def _finished() -> list[Spec]:
    return [s for s in HISTORY if s.status == "finished"]


def _calls() -> list[tuple[Spec, Call]]:
    return [(s, c) for s in HISTORY for c in s.calls]


def _status(spec: Spec, call: Call) -> str:
    if call.outcome == "none":
        return "unknown" if spec.status == "finished" else "pending"
    return {"done": "done", "rerun": "done", "failed": "failed", "unknown": "unknown"}[call.outcome]


def expect_distribution() -> list[tuple[Any, ...]]:
    counts = Counter((s.agent_name, s.release, s.stop_reason) for s in _finished() if s.release)
    totals = Counter((s.agent_name, s.release) for s in _finished() if s.release)
    rows = [(a, r, reason, n, 100.0 * n / totals[a, r]) for (a, r, reason), n in counts.items()]
    return sorted(rows, key=lambda t: (t[0], t[1], -t[3], t[2]))


def expect_medians() -> list[tuple[Any, ...]]:
    by: dict[str, list[Spec]] = {}
    for spec in _finished():
        by.setdefault(str(spec.stop_reason), []).append(spec)
    rows = [
        (
            reason,
            len(group),
            statistics.median(s.model_calls for s in group),
            statistics.median(s.tokens for s in group),
        )
        for reason, group in by.items()
    ]
    return sorted(rows, key=lambda t: (-t[1], t[0]))


def expect_tools() -> list[tuple[Any, ...]]:
    by: dict[str, list[tuple[Spec, Call]]] = {}
    for spec, call in _calls():
        by.setdefault(call.tool, []).append((spec, call))
    rows = []
    for name, calls in by.items():
        failures = sum(_status(s, c) in ("failed", "unknown") for s, c in calls)
        seconds = [c.seconds for _, c in calls if c.outcome != "none"]
        rows.append((name, len(calls), failures, 100.0 * failures / len(calls), seconds))
    return sorted(rows, key=lambda t: (-t[2], t[0]))


def check_distribution(rows: list[dict[str, Any]]) -> None:
    assert [(r["agent_name"], r["release"], r["stop_reason"], r["runs"]) for r in rows] == [
        t[:4] for t in expect_distribution()
    ]
    for row, expected in zip(rows, expect_distribution(), strict=True):
        assert number(row["percent"]) == pytest.approx(expected[4], abs=0.051)


def check_medians(rows: list[dict[str, Any]]) -> None:
    got = [
        (r["stop_reason"], r["runs"], number(r["median_steps"]), number(r["median_tokens"]))
        for r in rows
    ]
    assert got == expect_medians()


def check_tools(rows: list[dict[str, Any]]) -> None:
    expected = expect_tools()
    assert [(r["tool"], r["calls"], r["failures"]) for r in rows] == [t[:3] for t in expected]
    for row, (*_, percent, seconds) in zip(rows, expected, strict=True):
        assert number(row["failure_percent"]) == pytest.approx(percent, abs=0.051)
        assert number(row["mean_seconds"]) == pytest.approx(statistics.mean(seconds))


def check_resumed(rows: list[dict[str, Any]]) -> None:
    resumed = [s for s in HISTORY if s.resumes]
    resumed.sort(key=lambda s: (-s.resumes, -s.created_at.timestamp(), s.id))
    assert [(r["id"], r["resumes"], r["status"], r["stop_reason"]) for r in rows] == [
        (s.id, s.resumes, s.status, s.stop_reason) for s in resumed
    ]
    assert [r["steps"] for r in rows] == [
        s.model_calls if s.status == "finished" else len(s.calls) for s in resumed
    ]


def check_interrupted(rows: list[dict[str, Any]]) -> None:
    expected = sorted(
        (s.id, step, c.tool, _status(s, c))
        for s in HISTORY
        for step, c in enumerate(s.calls, start=1)
        if c.outcome in ("rerun", "unknown", "none")
    )
    assert [(r["run_id"], r["step"], r["tool"], r["status"]) for r in rows] == expected
    assert {r["attempt"] for r in rows if r["status"] == "pending"} == {None}


def check_spend(rows: list[dict[str, Any]]) -> None:
    days: dict[str, list[Spec]] = {}
    for spec in HISTORY:
        days.setdefault(spec.created_at.strftime("%Y-%m-%d"), []).append(spec)

    def spent(s: Spec) -> int:  # an unfinished run counts what it spent so far
        return s.tokens if s.status == "finished" else s.usage * len(s.calls)

    expected = [
        (day, len(group), sum(spent(s) for s in group), sum(spent(s) for s in group) * PER_TOKEN)
        for day, group in sorted(days.items())
    ]
    assert [(r["day"], r["runs"], int(r["tokens"]), number(r["cost"])) for r in rows] == expected


CHECKS = {
    "Stop-reason distribution per release": check_distribution,
    "Median steps and tokens per stop reason": check_medians,
    "The tools that fail most": check_tools,
    "Runs that were resumed after a crash": check_resumed,
    "Tool calls a crash interrupted": check_interrupted,
    "Token and cost spend per day": check_spend,
}


def test_every_documented_query_has_a_check() -> None:
    assert set(doc_queries()) == set(CHECKS)


@pytest.mark.parametrize("title", sorted(CHECKS))
def test_documented_query_answers(seeded: str, title: str) -> None:
    CHECKS[title](query(seeded, doc_queries()[title]))


def test_docs_describe_every_column(seeded: str) -> None:
    documented = SCHEMA.read_text()
    for name in ("runs", "entries", "run_summary", "tool_calls", "approvals", "root_spend"):
        heading = re.search(rf"^## (Table|View) `{name}`", documented, re.M)
        assert heading, f"the schema reference has no section on {name}"
        section = documented[heading.end() :].split("\n## ", 1)[0]
        with read_only_query(seeded, f"SELECT * FROM {name} LIMIT 1") as result:
            columns = result.columns
        missing = [c for c in columns if f"`{c}`" not in section]
        assert not missing, f"the schema reference does not describe {name}.{missing}"


# -- the views ------------------------------------------------------------------------------


def test_run_summary_counts_spend_so_far_and_duration(seeded: str) -> None:
    rows = {r["id"]: r for r in query(seeded, "SELECT * FROM run_summary")}
    assert len(rows) == len(HISTORY)
    for spec in HISTORY:
        row = rows[spec.id]
        steps = spec.model_calls if spec.status == "finished" else len(spec.calls)
        assert (row["status"], row["stop_reason"], row["steps"]) == (
            spec.status,
            spec.stop_reason,
            steps,
        )
        assert row["tokens"] == spec.usage * steps
        assert number(row["cost"]) == spec.usage * steps * PER_TOKEN
        assert row["resumes"] == spec.resumes
        assert row["day"] == spec.created_at.strftime("%Y-%m-%d")
        finished = _finished_at(spec)
        if finished is None:
            assert row["duration_seconds"] is None
        else:
            expected = (finished - spec.created_at).total_seconds()
            assert row["duration_seconds"] == pytest.approx(expected, abs=1e-6)


def test_tool_calls_pair_each_action_with_its_outcome(seeded: str) -> None:
    rows = query(seeded, "SELECT * FROM tool_calls ORDER BY run_id, step")
    expected = sorted(
        (s.id, step, c, _status(s, c)) for s in HISTORY for step, c in enumerate(s.calls, 1)
    )
    assert [(r["run_id"], r["step"], r["tool"], r["status"]) for r in rows] == [
        (run_id, step, c.tool, status) for run_id, step, c, status in expected
    ]
    for row, (run_id, step, call, status) in zip(rows, expected, strict=True):
        assert row["idempotency_key"] == f"{run_id}-{step}"
        assert row["args"] in ({"q": step}, json.dumps({"q": step}))  # JSONB / SQLite text
        if status in ("pending",) or call.outcome == "none":
            assert (row["attempt"], row["finished_at"], row["duration_seconds"]) == (None,) * 3
        else:
            assert row["attempt"] == (2 if call.outcome in ("rerun", "unknown") else 1)
            assert row["duration_seconds"] == pytest.approx(call.seconds, abs=1e-6)


class _Kill(BaseException):
    """A killed worker: nothing in the loop catches it."""


def test_views_read_a_real_durable_run(db_url: str) -> None:
    """Runs written by the real loop (a failing tool, a crash mid-call, a resume) read as
    the docs say: the views' join relies on the journal's order, so check it on real rows."""
    armed = {"kill": True}

    @tool
    def charge(amount: int) -> str:  # not idempotent: a crash leaves its outcome unknown
        if armed["kill"]:
            armed["kill"] = False
            raise _Kill
        return "charged"

    def lookup(name: str) -> str:
        raise KeyError(name)

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        seen = [m for m in transcript if m["role"] == "tool"]
        if not seen:
            return {"type": "tool", "name": "lookup", "args": {"name": "x"}, "usage": 10}
        if len(seen) == 1:
            return {"type": "tool", "name": "charge", "args": {"amount": 5}, "usage": 10}
        return {"type": "final", "content": "done", "usage": 10}

    agent = Agent(model, {"charge": charge, "lookup": lookup}, name="shop", release="3.1")
    with Runner(db_url) as runner:
        with pytest.raises(_Kill):
            runner.run(agent, "buy", id="real-run")
        pending = query(db_url, "SELECT status FROM tool_calls ORDER BY step")
        assert [r["status"] for r in pending] == ["failed", "pending"]
        shown = render_run(runner.get("real-run"), runner.row("real-run"))
        assert shown.endswith("  .. charge: no result yet (running, or a resume will settle it)")
        runner.resume("real-run", agent=agent, steal=True)
        shown = render_run(runner.get("real-run"), runner.row("real-run"))
        assert "  <- charge [error]  OutcomeUnknown: charge was interrupted" in shown
        assert shown.endswith("answer    done\n\nstopped   final: answered")
    calls = query(db_url, "SELECT tool, status, attempt FROM tool_calls ORDER BY step")
    assert [(c["tool"], c["status"], c["attempt"]) for c in calls] == [
        ("lookup", "failed", 1),
        ("charge", "unknown", 2),
    ]
    (summary,) = query(db_url, "SELECT * FROM run_summary")
    assert (summary["stop_reason"], summary["steps"], summary["tokens"]) == ("final", 3, 30)
    assert (summary["resumes"], summary["release"]) == (1, "3.1")
    assert summary["duration_seconds"] > 0


def test_show_says_why_a_run_stopped(db_url: str) -> None:
    def loop(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "tool", "name": "ping", "args": {"host": "a"}}

    def essay(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "final", "content": "first line\nsecond line " + "x" * 200}

    with Runner(db_url) as runner:
        looped = runner.run(Agent(loop, {"ping": lambda host: "pong"}), "ping", max_repeats=2)
        assert looped.run_id is not None
        shown = render_run(looped, runner.row(looped.run_id))
        assert shown.endswith(
            "stopped   repeated_call: looped: the same tool call, same arguments, "
            "too many times (max_repeats=2)"
        )
        answered = runner.run(Agent(essay), "write")
        assert answered.run_id is not None
        shown = render_run(answered, runner.row(answered.run_id))
    # The answer is shown whole, its lines indented under the first.
    assert "answer    first line\n          second line " + "x" * 200 in shown


# -- read-only SQL ------------------------------------------------------------------------------

WRITES = [
    "DELETE FROM runs",
    "UPDATE runs SET status = 'queued'",
    "INSERT INTO runs (id, task, budgets, status, wrapped_up, steps, tokens, cost, resumes,"
    " stalled_resumes, progress_seq, cancel_requested, lease_epoch, created_at, updated_at)"
    " SELECT id || 'x', task, budgets, status, wrapped_up, steps, tokens, cost, resumes,"
    " stalled_resumes, progress_seq, cancel_requested, lease_epoch, created_at, updated_at"
    " FROM runs",
    "CREATE TABLE stolen (x INTEGER)",
    "DROP VIEW run_summary",
    "WITH gone AS (DELETE FROM entries RETURNING seq) SELECT count(*) FROM gone",
]
# Several statements in one: refused whole (SQLite and the prepared statement accept one).
SMUGGLED = [
    "SELECT 1; DELETE FROM runs",
    "COMMIT; DELETE FROM runs",
    "COMMIT; SET default_transaction_read_only = off; COMMIT; DELETE FROM runs",
]


def _contents(engine: Engine) -> tuple[int, int, list[str]]:
    with engine.connect() as connection:
        n_runs = connection.execute(select(func.count()).select_from(runs)).scalar_one()
        n_entries = connection.execute(select(func.count()).select_from(entries)).scalar_one()
        statuses = list(connection.execute(select(runs.c.status).order_by(runs.c.id)).scalars())
        connection.rollback()
    return n_runs, n_entries, statuses


@pytest.mark.parametrize("sql", WRITES + SMUGGLED)
def test_read_only_sql_refuses_writes(seeded: str, engine: Engine, sql: str) -> None:
    before = _contents(engine)
    with pytest.raises(QueryFailed) as refused:
        query(seeded, sql)
    assert "\n" not in str(refused.value)
    assert _contents(engine) == before
    with engine.connect() as connection:  # nothing was created either
        assert "stolen" not in connection.dialect.get_table_names(connection)


def test_read_only_refusal_names_the_reason(seeded: str) -> None:
    with pytest.raises(QueryFailed, match=r"^refused: runner sql is read-only \("):
        query(seeded, "DELETE FROM runs")
    with pytest.raises(QueryFailed, match=r"^query failed: "):
        query(seeded, "SELECT nothing FROM nowhere")


def test_read_only_query_reads_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runner.db'}"
    engine = open_engine(url)
    upgrade(engine)
    seed(engine)
    with engine.begin() as writer:  # BEGIN IMMEDIATE: a worker in the middle of a commit
        writer.execute(text("UPDATE runs SET task = task WHERE id = 'run-000'"))
        assert query(url, "SELECT count(*) AS n FROM runs") == [{"n": len(HISTORY)}]
    engine.dispose()


# -- stats ----------------------------------------------------------------------------------


def _runs_only(agent: str, release: str, day: int, reasons: dict[str, int]) -> list[Spec]:
    specs = []
    for reason, n in reasons.items():
        for _ in range(n):
            specs.append(Spec(f"{agent}-{release}-{len(specs):03d}", agent, release, reason, day))
            specs[-1].minute = len(specs)
    return [
        Spec(s.id, s.agent_name, s.release, s.stop_reason, s.day, minute=s.minute) for s in specs
    ]


def test_stats_percentages_and_regression_flag(db_url: str, engine: Engine) -> None:
    history = [
        *_runs_only("support", "1.0", 0, {"final": 32, "max_steps": 4, "repeated_call": 4}),
        *_runs_only("support", "1.1", 1, {"final": 20, "max_steps": 16, "repeated_call": 4}),
        # A 5-run release: +20 points of tool_errors is too few runs to tell from chance.
        *_runs_only("support", "1.2", 2, {"final": 3, "max_steps": 1, "tool_errors": 1}),
        *_runs_only("coder", "0.9", 0, {"final": 10, "cancelled": 2}),
    ]
    seed(engine, history)
    groups = stop_reason_stats(engine, by="release")
    assert [g.label for g in groups] == [
        "coder 0.9",
        "support 1.0",
        "support 1.1",
        "support 1.2",
    ]
    coder, first, second, third = groups
    assert [(s.stop_reason, s.count, round(s.percent, 2)) for s in first.shares] == [
        ("final", 32, 80.0),
        ("max_steps", 4, 10.0),
        ("repeated_call", 4, 10.0),
    ]
    assert [(s.stop_reason, round(s.percent, 2)) for s in coder.shares] == [
        ("final", 83.33),
        ("cancelled", 16.67),
    ]
    assert (coder.previous, first.previous, second.previous) == (None, None, "support 1.0")
    assert [r.stop_reason for r in second.rises] == ["max_steps"]
    rise = second.rises[0]
    assert (rise.previous_percent, rise.percent, rise.points) == pytest.approx((10, 40, 30))
    assert rise.p_value < 0.01
    assert third.rises == []  # tool_errors 0% -> 20%, but on 5 runs
    # final rose from 50% to 60% in 1.2: more answers is never flagged, whatever the sample.
    assert not any(r.stop_reason == "final" for g in groups for r in g.rises)
    # A lower bar, a bigger flag set; the default bar hides the 1.2 rise of 20 points.
    assert stop_reason_stats(engine, by="release", min_rise=40)[2].rises == []


def test_stats_by_day_agent_and_since(db_url: str, engine: Engine) -> None:
    seed(engine)
    days = stop_reason_stats(engine, by="day")
    finished = _finished()
    by_day = Counter(s.created_at.strftime("%Y-%m-%d") for s in finished)
    assert [(g.label, g.runs) for g in days] == sorted(by_day.items())
    assert [g.previous for g in days] == [None, days[0].label, days[1].label]
    agents = stop_reason_stats(engine, by="agent")
    assert [(g.label, g.runs, g.previous) for g in agents] == [
        ("-", 1, None),
        ("coder", 5, None),
        ("support", 15, None),
    ]
    recent = stop_reason_stats(engine, by="day", since=BASE + timedelta(days=1))
    assert [g.label for g in recent] == [days[1].label, days[2].label]
    only = stop_reason_stats(engine, by="release", agent_name="coder")
    assert [(g.label, g.runs) for g in only] == [("coder 2.0", 5)]


def test_parse_moment() -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert parse_moment("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_moment("2026-11-01T10:30") == datetime(2026, 11, 1, 10, 30, tzinfo=UTC)
    assert parse_moment("2026-11-01T10:30+02:00") == datetime(2026, 11, 1, 8, 30, tzinfo=UTC)
    assert parse_moment("7d", now=now) == now - timedelta(days=7)
    assert parse_moment("12h", now=now) == now - timedelta(hours=12)
    assert parse_moment("2w", now=now) == now - timedelta(weeks=2)
    with pytest.raises(ValueError, match="not a date"):
        parse_moment("last tuesday")


# -- export -------------------------------------------------------------------------------


def _exported(engine: Engine, **kwargs: Any) -> list[dict[str, Any]]:
    out = io.StringIO()
    done = export_runs(engine, out.write, **kwargs)
    lines = out.getvalue().splitlines()
    assert done.runs == len(lines)
    runs_ = [json.loads(line) for line in lines]
    assert done.entries == sum(len(r["entries"]) for r in runs_)
    return runs_


def _entry_from_json(data: dict[str, Any]) -> Entry:
    return Entry(
        kind=EntryKind(data["kind"]),
        step=data["step"],
        counters=Counters(data["steps"], data["tokens"], data["cost"], data["error_streak"]),
        content=data["content"],
        action_type=data["action_type"],
        tool=data["tool"],
        args=data["args"],
        is_error=data["is_error"],
        error=data["error"],
        idempotency_key=data["idempotency_key"],
        attempt=data["attempt"],
        tokens=data["usage_tokens"],
        cost=data["usage_cost"],
    )


def test_export_round_trip(seeded: str, engine: Engine) -> None:
    exported = _exported(engine)
    assert [r["id"] for r in exported] == sorted(s.id for s in HISTORY)
    for data in exported:
        row = store.get_run(engine, data["id"])
        for name in ("agent", "agent_name", "release", "task", "budgets", "output", "error"):
            assert data[name] == getattr(row, name), name
        assert (data["status"], data["stop_reason"]) == (row.status, row.stop_reason)
        assert (data["steps"], data["tokens"], data["cost"]) == (row.steps, row.tokens, row.cost)
        assert (data["resumes"], data["lease_owner"]) == (row.resumes, row.lease_owner)
        for name in ("created_at", "updated_at", "finished_at"):
            stamp = data[name] and datetime.fromisoformat(data[name])
            assert stamp == getattr(row, name), name
        journal = store.load_entries(engine, data["id"])
        assert [(_entry_from_json(e), e["lease_epoch"]) for e in data["entries"]] == journal
        assert [e["seq"] for e in data["entries"]] == list(range(len(journal)))
        assert [datetime.fromisoformat(e["created_at"]) for e in data["entries"]] == [
            e["created_at"] for e in _journal(next(s for s in HISTORY if s.id == data["id"]))
        ]


def test_export_filters(seeded: str, engine: Engine) -> None:
    since = BASE + timedelta(days=2)
    assert [r["id"] for r in _exported(engine, since=since)] == sorted(
        s.id for s in HISTORY if s.created_at >= since
    )
    picked = _exported(engine, run_ids=["run-live", "run-000"])
    assert [r["id"] for r in picked] == ["run-000", "run-live"]
    assert picked[1]["status"] == "running"
    assert [e["kind"] for e in picked[1]["entries"]] == ["task", "action", "observation", "action"]


def test_export_streams_runs_across_fetch_batches(db_url: str, engine: Engine) -> None:
    """More rows than one fetch: runs and entries stay paired across the cursors' batches."""
    long = Spec("b-long", "bulk", "1", "max_steps", 0, [Call("search", "done")] * 1200)
    many = [Spec(f"b-{i:04d}", "bulk", "1", "final", 0, minute=i) for i in range(1500)]
    seed(engine, [long, *many])
    exported = _exported(engine)
    assert len(exported) == 1501
    assert exported[-1]["id"] == "b-long"
    assert [e["seq"] for e in exported[-1]["entries"]] == list(range(1 + 2 * 1200))
    assert all(len(r["entries"]) == 2 and r["entries"][0]["seq"] == 0 for r in exported[:-1])
    assert all(e["created_at"].startswith("2026-11-02") for e in exported[0]["entries"])


# -- prune ----------------------------------------------------------------------------------


def test_prune_deletes_old_finished_runs_in_batches(seeded: str, engine: Engine) -> None:
    cutoff = BASE + timedelta(days=2)  # the finished runs of days 0 and 1
    old = [s for s in HISTORY if s.status == "finished" and s.created_at < cutoff]
    kept = [s for s in HISTORY if s not in old]
    # The unfinished runs are old too, by creation: still never touched.
    assert any(s.status != "finished" for s in kept)
    old_entries = sum(len(list(_journal(s))) for s in old)

    planned = prune_runs(engine, cutoff, dry_run=True)
    assert (planned.runs, planned.entries) == (len(old), old_entries)
    assert planned.reasons == Counter(str(s.stop_reason) for s in old)
    assert _contents(engine)[:2] == (len(HISTORY), sum(len(list(_journal(s))) for s in HISTORY))

    pruned = prune_runs(engine, cutoff, batch_size=3)
    assert (pruned.runs, pruned.entries, pruned.reasons) == (
        planned.runs,
        planned.entries,
        planned.reasons,
    )
    with engine.connect() as connection:
        left = set(connection.execute(select(runs.c.id)).scalars())
        orphans = connection.execute(
            select(func.count())
            .select_from(entries)
            .where(entries.c.run_id.not_in(select(runs.c.id)))
        ).scalar_one()
    assert left == {s.id for s in kept}
    assert orphans == 0
    assert prune_runs(engine, cutoff).runs == 0


def test_prune_never_touches_unfinished_runs(seeded: str, engine: Engine) -> None:
    prune_runs(engine, datetime(2100, 1, 1, tzinfo=UTC), batch_size=5)
    with engine.connect() as connection:
        left = sorted(connection.execute(select(runs.c.id, runs.c.status)).all())
    assert left == [("run-live", "running"), ("run-queued", "queued")]


@pytest.mark.postgres
def test_prune_never_takes_the_journal_of_a_run_revived_while_it_prunes(
    postgres_database: str,
) -> None:
    # A run picked by prune as old and finished, then revived by another transaction before
    # prune deletes it, keeps its journal: prune leaves a run another transaction holds.
    engine = open_engine(postgres_database)
    try:
        with engine.begin() as connection:
            connection.execute(text("TRUNCATE runs, entries CASCADE"))
        with Runner(postgres_database) as runner:
            agent = Agent(lambda t: {"type": "final", "content": "ok"}, {}, name="short")
            runner.run(agent, "task", id="revived")
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE runs SET finished_at = :at WHERE id = 'revived'"),
                {"at": BASE},
            )
        journal = _contents(engine)[1]
        assert journal > 0

        reviver = engine.connect()
        reviving = reviver.begin()
        reviver.execute(text("SELECT id FROM runs WHERE id = 'revived' FOR UPDATE"))
        done: list[Any] = []
        pruning = threading.Thread(
            target=lambda: done.append(prune_runs(engine, BASE + timedelta(days=1)))
        )
        pruning.start()

        def blocked_or_done() -> bool:
            if done:
                return True
            with engine.connect() as watcher:
                return bool(
                    watcher.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND wait_event_type = 'Lock'"
                        )
                    ).scalar_one()
                )

        wait_until(blocked_or_done, timeout=60, what=lambda: "prune neither ended nor waited")
        reviver.execute(
            text("UPDATE runs SET status = 'queued', finished_at = NULL WHERE id = 'revived'")
        )
        reviving.commit()
        reviver.close()
        pruning.join(60)
        assert not pruning.is_alive()
        assert done[0].runs == 0
        assert _contents(engine)[:2] == (1, journal)  # the run and its whole journal
    finally:
        engine.dispose()
