"""`runner mcp serve`: runs as MCP tools, for agents and IDEs that are MCP clients.

A face, like the CLI and the HTTP API: every tool calls the `Runner` (in a thread: the
library blocks, the server must not), answers with the API's JSON documents, and refuses
with the library's own words (an error result). History queries go through `runner sql`'s
guards. Each tool says what it does to the server's client with MCP's annotations.

The SDK (`mcp` 2.3) serves no MCP Tasks (SEP-1686): it has their wire types, but its server
routes no `tasks/*` request and never answers `tools/call` with a task, and its client cannot
ask for one. A long run is `submit_run`, then `wait_for_run` (which returns once the run
finishes or waits for a person, or after its wait) or `get_run`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from runner.core.status import STATES
from runner.core.stop_reasons import StopReason
from runner.errors import RunnerError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from runner.service.runner import Runner

T = TypeVar("T")

# How many events one `run_events` call gives at most (ask again after its position).
EVENT_PAGE = 200
# The longest a `wait_for_run` waits, in seconds: a client asks again after it.
LONGEST_WAIT = 300.0
# The most runs `list_runs` gives.
MAX_LIST = 500

INSTRUCTIONS = (
    "runner keeps durable LLM agent runs in a database. Submit a run with submit_run (an "
    "agent reference module:attr or file.py:attr, and a task), then wait_for_run or get_run "
    "until its state is finished (its output and stop_reason) or waiting (a call needs a "
    "person: answer with approve_call, deny_call or reply_to_run). run_events gives a run's "
    "journal after a position; query_history runs one read-only SQL statement."
)


class Runs:
    """The server's runner, opened on first use (a server that is never called opens no
    database), shared by every tool."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._runner: Runner | None = None
        self._lock = threading.Lock()

    def runner(self) -> Runner:
        with self._lock:
            if self._runner is None:
                from runner.service.runner import Runner

                self._runner = Runner(self.url)
            return self._runner

    def close(self) -> None:
        with self._lock:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    async def call(self, work: Callable[[Runner], T]) -> T:
        """`work` on the runner in a thread; the library's refusals as the tool's error."""
        import anyio.to_thread
        from mcp.server.mcpserver.exceptions import ToolError

        try:
            return await anyio.to_thread.run_sync(lambda: work(self.runner()))
        except (RunnerError, ValueError) as exc:
            raise ToolError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def make_server(url: str | None = None) -> tuple[MCPServer, Runs]:
    """The MCP server of the runs in the database at `url`, and what it holds open."""
    from mcp.server.mcpserver import MCPServer

    runs = Runs(url)
    server = MCPServer("runner", instructions=INSTRUCTIONS, log_level="WARNING")
    _run_tools(server, runs)
    _answer_tools(server, runs)
    _read_tools(server, runs)
    return server, runs


def _hints(*, read_only: bool = False, destructive: bool = False, idempotent: bool = False) -> Any:
    from mcp.types import ToolAnnotations

    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


def _run_tools(server: MCPServer, runs: Runs) -> None:
    from runner.service.documents import run_json, sent_json

    @server.tool(annotations=_hints())
    async def submit_run(
        agent: str,
        task: str,
        budgets: dict[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        delay_seconds: float | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Queue a run of AGENT (module:attr or file.py:attr) on TASK for a worker.

        budgets: max_steps, max_tokens, max_cost, max_seconds... as `runner submit` takes
        them. The same idempotency_key again names the same run (it is not queued twice).
        Returns the run (its id, its state).
        """
        run_id = _key_id(idempotency_key) if idempotency_key is not None else None

        def put(runner: Runner) -> dict[str, Any]:
            chosen = runner.submit(
                agent, task, id=run_id, queue=queue, priority=priority, delay=delay_seconds,
                **(budgets or {}),
            )  # fmt: skip
            return run_json(None, runner.row(chosen))

        return await runs.call(put)

    @server.tool(annotations=_hints(destructive=True, idempotent=True))
    async def cancel_run(run_id: str) -> dict[str, Any]:
        """Ask a run to stop (stop reason `cancelled`); a finished run is left as it is."""

        def stop(runner: Runner) -> dict[str, Any]:
            whole = runner.row(run_id).id
            return run_json(runner.cancel(whole), runner.row(whole))

        return await runs.call(stop)

    @server.tool(annotations=_hints())
    async def send_message(
        run_id: str, message: str, idempotency_key: str | None = None, revive: bool = False
    ) -> dict[str, Any]:
        """Send a message into a run: the model reads it before its next step. The same
        idempotency_key again is the same message. A finished run takes it with revive."""
        return await runs.call(
            lambda runner: sent_json(
                runner.send(run_id, message, key=idempotency_key, revive=revive)
            )
        )


def _answer_tools(server: MCPServer, runs: Runs) -> None:
    from runner.service.documents import answered_json

    @server.tool(annotations=_hints())
    async def approve_call(
        run_id: str, call: str | None = None, note: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Approve the call a waiting run waits for (`call`: its key, when it waits for
        several); the run goes on and the call runs."""
        return await runs.call(
            lambda runner: answered_json(runner.approve(run_id, call=call, note=note, by=by))
        )

    @server.tool(annotations=_hints())
    async def deny_call(
        run_id: str, reason: str, call: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Deny the call a waiting run waits for: the model is told `reason` instead."""
        return await runs.call(
            lambda runner: answered_json(runner.deny(run_id, reason=reason, call=call, by=by))
        )

    @server.tool(annotations=_hints())
    async def reply_to_run(
        run_id: str, text: str, call: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Answer the question a waiting run asked a person (ask_human): `text` is what
        the model is told."""
        return await runs.call(
            lambda runner: answered_json(runner.reply(run_id, text, call=call, by=by))
        )


def _read_tools(server: MCPServer, runs: Runs) -> None:
    from runner.service.documents import event_json, run_json

    @server.tool(annotations=_hints(read_only=True, idempotent=True))
    async def get_run(run_id: str, transcript: bool = False) -> dict[str, Any]:
        """A run: its state (queued, running, waiting, finished), output, stop_reason, what
        it waits for, and with transcript its messages."""

        def read(runner: Runner) -> dict[str, Any]:
            whole = runner.row(run_id).id
            return run_json(runner.get(whole), runner.row(whole), transcript=transcript)

        return await runs.call(read)

    @server.tool(annotations=_hints(read_only=True, idempotent=True))
    async def list_runs(
        state: str | None = None,
        stop_reason: str | None = None,
        release: str | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        """The latest runs, newest first, optionally of one state, stop reason or release."""
        if state is not None and state not in STATES:
            raise ValueError(f"state must be one of: {', '.join(STATES)}")
        reasons = {reason.value for reason in StopReason}
        if stop_reason is not None and stop_reason not in reasons:
            raise ValueError(f"stop_reason must be one of: {', '.join(sorted(reasons))}")
        if not 1 <= limit <= MAX_LIST:
            raise ValueError(f"limit must be between 1 and {MAX_LIST}")

        def read(runner: Runner) -> dict[str, Any]:
            rows = runner.list(
                state=state,
                stop_reason=StopReason(stop_reason) if stop_reason else None,
                release=release,
                limit=limit,
            )
            waits = runner.waits(rows)
            return {"runs": [run_json(None, row, wait=waits.get(row.id)) for row in rows]}

        return await runs.call(read)

    @server.tool(annotations=_hints(read_only=True, idempotent=True))
    async def run_events(run_id: str, after: int = -1, wait_seconds: float = 0) -> dict[str, Any]:
        """A run's journal entries after position `after` (-1: from the first), at most
        200; ask again with the returned position. With wait_seconds, waits that long at
        most for the run to finish or to wait for a person, giving entries as they come."""
        return await runs.call(
            lambda runner: _events(runner, run_id, after, wait_seconds, event_json)
        )

    @server.tool(annotations=_hints(read_only=True, idempotent=True))
    async def wait_for_run(run_id: str, wait_seconds: float = 60) -> dict[str, Any]:
        """Wait until a run finishes or waits for a person (or wait_seconds pass, at most
        300), then return it as get_run does: call again while its state is queued or
        running."""

        def read(runner: Runner) -> dict[str, Any]:
            whole = runner.row(run_id).id
            _events(runner, whole, -1, wait_seconds, None)
            return run_json(runner.get(whole), runner.row(whole))

        return await runs.call(read)

    @server.tool(annotations=_hints(read_only=True, idempotent=True))
    async def query_history(sql: str, timeout_seconds: float = 30) -> dict[str, Any]:
        """Run one SQL statement read-only over runner's tables and views (as `runner sql`
        does: the database itself refuses any write) and return its columns and rows."""

        def read(runner: Runner) -> dict[str, Any]:
            from runner.history import read_only_query

            with read_only_query(runs.url, sql, timeout=timeout_seconds or None) as result:
                found = {"columns": list(result.columns), "rows": [list(r) for r in result.rows]}
            # Values JSON has no type for (times, decimals) as text, as `runner sql --json`.
            plain: dict[str, Any] = json.loads(json.dumps(found, default=str))
            return plain

        return await runs.call(read)

    @server.resource(
        "runner://runs/{run_id}/transcript",
        name="transcript",
        description="A run's transcript: the messages its model was shown, as JSON.",
        mime_type="application/json",
    )
    async def transcript(run_id: str) -> str:
        return await runs.call(lambda runner: json.dumps(runner.get(run_id).transcript))


def _events(
    runner: Runner,
    run_id: str,
    after: int,
    wait_seconds: float,
    shown: Callable[[Any], dict[str, Any]] | None,
) -> dict[str, Any]:
    """The run's events after `after` (following for `wait_seconds` at most, until it
    finishes or waits), as `shown` says; and the position to ask after next."""
    if not 0 <= wait_seconds <= LONGEST_WAIT:
        raise ValueError(f"wait_seconds must be between 0 and {LONGEST_WAIT:g}")
    if after < -1:
        raise ValueError("after must be -1 (from the first) or a position")
    follow = wait_seconds > 0
    stream = runner.events(run_id, after=after, follow=follow, until_waiting=True)
    timer = threading.Timer(wait_seconds, stream.close) if follow else None
    events: list[dict[str, Any]] = []
    try:
        if timer is not None:
            timer.daemon = True
            timer.start()
        for event in stream:
            if shown is not None:
                events.append(shown(event))
            if len(events) >= EVENT_PAGE:
                break
    finally:
        if timer is not None:
            timer.cancel()
        stream.close()
    return {"run_id": stream.run_id, "events": events, "position": stream.position}


def _key_id(key: str) -> str:
    """The run an idempotency key names (the HTTP API's rule: the same key, the same run)."""
    import hashlib

    from runner.service.runner_base import RUN_ID_PATTERN

    if not key or len(key) > 200 or not key.isprintable() or not key.isascii():
        raise ValueError("idempotency_key must be 1 to 200 printable ASCII characters")
    if RUN_ID_PATTERN.fullmatch(key):
        return key
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:31]
