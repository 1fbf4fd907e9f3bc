"""On a worker, a sub-agent's call commits as often as a plain tool call: twice.

The call and its wait go in the commit that parks the parent (with the child, created
claimed for the worker's slot, its task and its first call's hold); the child's answer goes
in the commit that ends it, delivers its end and takes the parent back; the parent's
observation of that end, which the delivered answer decides alone, rides in the parent's
next write. A plain call: its action, then its observation."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, event

from runner import Agent, Runner
from runner.service.worker import Worker
from runner.testing import FunctionModel, turns


def _caller(tool: str) -> FunctionModel:
    """Calls `tool` as many times as its task says, one call a step, then answers."""

    def move(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        done = turns(transcript)
        if done < int(transcript[0]["content"]):
            return {"type": "tool", "name": tool, "args": {"task": f"call {done}"}}
        return {"type": "final", "content": f"{done} calls"}

    return FunctionModel(move)


def _answer(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "final", "content": f"{transcript[0]['content']} done"}


ANSWERER = Agent(FunctionModel(_answer), name="answerer")
_ROOMY = {"max_steps": 50, "max_tokens": None}
PLAIN_CALLER = Agent(_caller("echo"), {"echo": lambda task: f"did {task}"}, name="plain", **_ROOMY)
SUB_CALLER = Agent(_caller("echo"), {"echo": ANSWERER.as_tool("echo")}, name="sub", **_ROOMY)


@contextmanager
def commits_anywhere() -> Iterator[list[int]]:
    """Every commit made in this process inside the block (the worker's engine included)."""
    counted = [0]

    def count(*_args: Any) -> None:
        counted[0] += 1

    event.listen(Engine, "commit", count)
    try:
        yield counted
    finally:
        event.remove(Engine, "commit", count)


def commits_of(db_url: str, agent: Agent, calls: int) -> int:
    """The commits of a run of `agent` making `calls` calls, submitted and drained by a
    worker with one slot."""
    with Runner(db_url) as runner:
        run_id = runner.submit(agent, str(calls))
    with commits_anywhere() as made:
        Worker(db_url, concurrency=1, once=True, poll=0.05).serve()
    with Runner(db_url) as runner:
        assert runner.get(run_id).output == f"{calls} calls"
    return made[0]


def test_a_sub_agents_call_commits_as_often_as_a_plain_call(db_url: str) -> None:
    # Three calls more, each run: what the run's start and end commit cancels out.
    plain = commits_of(db_url, PLAIN_CALLER, 6) - commits_of(db_url, PLAIN_CALLER, 3)
    sub = commits_of(db_url, SUB_CALLER, 6) - commits_of(db_url, SUB_CALLER, 3)
    assert plain == 6
    assert sub == plain


@contextmanager
def statements_anywhere(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement the drivers run for the runs in this process inside the block,
    besides BEGIN, COMMIT and ROLLBACK, however it is sent (SQLAlchemy's execute, the
    journal's own cursor, the plain reads): sqlite3's trace of each connection opened
    meanwhile, and psycopg's cursors' executes (each a round trip). Not those of this thread,
    which serves the worker (its claims, and its housekeeping, once a second: as many more
    as the drain takes seconds), nor the heartbeat's."""
    ran: list[str] = []
    ends = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
    serving = threading.current_thread()

    def traced(sql: str) -> None:
        here = threading.current_thread()
        if here is serving or here.name == "runner-heartbeat":
            return
        if not sql.lstrip().upper().startswith(ends):
            ran.append(sql)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.set_trace_callback(traced)

    psycopg = pytest.importorskip("psycopg")
    execute = psycopg.Cursor.execute

    def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        traced(query if isinstance(query, str) else str(query))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    event.listen(Engine, "connect", on_connect)
    try:
        yield ran
    finally:
        event.remove(Engine, "connect", on_connect)
        monkeypatch.undo()


def statements_of(db_url: str, agent: Agent, calls: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """The statements of a run of `agent` making `calls` calls, on a worker with one slot."""
    with Runner(db_url) as runner:
        run_id = runner.submit(agent, str(calls))
    with statements_anywhere(monkeypatch) as ran:
        Worker(db_url, concurrency=1, once=True, poll=0.05).serve()
    with Runner(db_url) as runner:
        assert runner.get(run_id).output == f"{calls} calls"
    return len(ran)


def test_a_sub_agents_call_makes_few_statements(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each a round trip on PostgreSQL. A plain call's two writes are one statement each. A
    # sub-agent's call makes ten there: the park (the parent's entries; its park with the
    # child and the child's task in one statement; the tree's lock, the read and the hold of
    # the child's first call) and the child's end (its entry, ended in the same statement;
    # the charge up its tree; the parent's row and its open waits read; the answer with the
    # parent's claim back in one statement). Fourteen before. SQLite runs each apart (and
    # drops the tree's done holds in a statement of its own). A sweep of stale holds may
    # come once in a while, on either.
    def more(agent: Agent) -> int:
        six = statements_of(db_url, agent, 6, monkeypatch)
        return six - statements_of(db_url, agent, 3, monkeypatch)

    plain, sub = more(PLAIN_CALLER), more(SUB_CALLER)
    assert plain == 3 * 2
    more_a_call = 8 if db_url.startswith("postgresql") else 13
    assert sub - plain <= 3 * more_a_call + 2
