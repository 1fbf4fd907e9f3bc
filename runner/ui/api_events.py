"""A run's events as Server-Sent Events (sse-starlette), for `GET /api/runs/{id}/events`.

Each journal entry is one `entry` event whose `id:` is its position, so a client that
reconnects with `Last-Event-ID` (an EventSource does so by itself) resumes right after the
last entry it got: none twice, none skipped. Once the run has finished and every entry was
sent, one `end` event (no `id:`) carries the run as `GET /api/runs/{id}` gives it, and the
stream closes. It opens with a comment and a `retry:` of RETRY_MILLISECONDS. Asked with
`?deltas=true`, the pieces of the model call in flight come too, as `delta` events with no
`id:` (ephemeral: a reconnect gets those still stored, runner.service.events says which).
Asked with `?tree=true`, the entries of every run below it come too, each naming its
`run_id`, with no `id:` (a position is one run's: a reconnect reads the tree again, `after`
counting for the run asked for alone); the stream ends when every run of the tree has.
The stream is `Runner.events(..., follow=True)`: while nothing new comes, it sends no
statement (the server's one watcher of followed runs wakes it: runner.sql.follows), and
a comment line every PING_SECONDS keeps proxies from closing a quiet connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from runner.service.documents import delta_json, event_json, run_json
from runner.service.events import DeltaEvent, Event, EventStream
from runner.service.runner import Runner
from runner.service.tree_events import TreeStream

PING_SECONDS = 15
# How long a disconnected EventSource waits before it reconnects (with Last-Event-ID).
RETRY_MILLISECONDS = 1000


Stream = EventStream[Event] | EventStream[Event | DeltaEvent] | TreeStream[Event | DeltaEvent]


def response(stream: Stream, runner: Runner) -> EventSourceResponse:
    """The stream as an SSE response; it stops following when the client goes away."""
    return EventSourceResponse(_events(stream, runner), ping=PING_SECONDS)


def _json(data: dict[str, Any]) -> str:
    # ASCII: a lone surrogate a tool returned is escaped, and no raw newline ends the line.
    return json.dumps(data, separators=(",", ":"))


async def _events(stream: Stream, runner: Runner) -> AsyncIterator[ServerSentEvent]:
    try:
        # At once, before any entry: a client (or a proxy) sees the stream is open, and an
        # EventSource learns how soon to come back if it is cut.
        yield ServerSentEvent(comment=f"run {stream.run_id} after {stream.position}",
                              retry=RETRY_MILLISECONDS)  # fmt: skip
        async for event in stream:
            if isinstance(event, DeltaEvent):
                # No id: a delta is not durable, and Last-Event-ID must stay an entry's.
                yield ServerSentEvent(data=_json(delta_json(event)), event="delta")
            elif isinstance(stream, TreeStream):
                # No id: a position is one run's, and Last-Event-ID could resume one run of
                # the tree alone; a reconnect reads the tree again (run_id and position say
                # which entries the client has).
                yield ServerSentEvent(data=_json(event_json(event)), event="entry")
            else:
                yield ServerSentEvent(
                    data=_json(event_json(event)), id=str(event.position), event="entry"
                )

        def ending() -> dict[str, Any]:
            return {"event": "end", "position": stream.position} | run_json(
                runner.get(stream.run_id), runner.row(stream.run_id)
            )

        yield ServerSentEvent(data=_json(await run_in_threadpool(ending)), event="end")
    finally:
        stream.close()
