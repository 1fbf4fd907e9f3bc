"""Local stand-ins for the OpenAI and Anthropic HTTP APIs: scripted replies, recorded requests.

The real SDK clients talk HTTP to these, so a test sees the exact bytes an adapter sends
and the SDK parses exactly what the provider would answer. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering: longer than a client's timeout, say
    # A streamed reply (text/event-stream): these events, each flushed as it is written;
    # before event `hold_after`, the server waits for `hold` (a stream stopped mid-call),
    # and it notes when it wrote each event in `sent` (time.monotonic()).
    events: tuple[bytes, ...] | None = None
    hold: threading.Event | None = None
    hold_after: int = 0
    sent: list[float] | None = None


class FakeServer:
    """A scripted HTTP server: each request gets the next reply, and is recorded."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self._quiet()
        # A short poll keeps stop() quick: shutdown waits for serve_forever's next poll.
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def reply(
        self,
        body: Any,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> FakeServer:
        """Queue a reply: a JSON value, or raw bytes sent as they are."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        with self._lock:
            self.script.append(Reply(status, raw, dict(headers or {}), delay))
        return self

    def stream(
        self,
        events: list[bytes],
        *,
        hold: threading.Event | None = None,
        hold_after: int = 0,
        sent: list[float] | None = None,
    ) -> FakeServer:
        """Queue a streamed reply: `events` (server-sent events, as fake_streams makes them)."""
        with self._lock:
            self.script.append(Reply(200, b"", {}, 0.0, tuple(events), hold, hold_after, sent))
        return self

    @property
    def bodies(self) -> list[Any]:
        return [request.json for request in self.requests]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.script:
                return self.script.popleft()
        unscripted = {"error": {"message": "the fake server has no reply scripted for this"}}
        return Reply(599, json.dumps(unscripted).encode())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = Request(
                    "POST",
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                )
                reply = server._next(request)
                if reply.events is not None:
                    self._stream(reply)
                    return
                time.sleep(reply.delay)
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply.body)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for n, event in enumerate(reply.events or ()):
                    if reply.hold is not None and n == reply.hold_after:
                        reply.hold.wait()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                    if reply.sent is not None:
                        reply.sent.append(time.monotonic())
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output quiet

        return Handler

    def _quiet(self) -> None:
        # A client that timed out has hung up: writing its late reply fails, as it should.
        self._http.handle_error = lambda request, address: None  # type: ignore[method-assign]


@contextmanager
def serving() -> Iterator[FakeServer]:
    server = FakeServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- OpenAI Chat Completions ------------------------------------------------------------------


def openai_completion(
    content: str | None = None,
    *,
    calls: list[tuple[str, str, str]] | None = None,
    refusal: str | None = None,
    finish_reason: str | None = None,
    usage: tuple[int, int, int] = (100, 20, 0),
    model: str = "gpt-4.1-mini-2025-04-14",
) -> dict[str, Any]:
    """A chat.completion body; `calls` are (id, name, arguments JSON text)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if calls:
        message["tool_calls"] = [
            {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for id, name, arguments in calls
        ]
    prompt, completion, cached = usage
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1767225600,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        },
    }


def openai_error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# -- Anthropic Messages -----------------------------------------------------------------------


def anthropic_message(
    *blocks: dict[str, Any],
    stop_reason: str | None = None,
    usage: tuple[int, int, int, int] = (100, 20, 0, 0),
    model: str = "claude-haiku-4-5-20251001",
) -> dict[str, Any]:
    """A message body; usage is (input, output, cache read, cache creation) tokens."""
    uses_tools = any(block["type"] == "tool_use" for block in blocks)
    given, taken, read, written = usage
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(blocks),
        "stop_reason": stop_reason or ("tool_use" if uses_tools else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": given,
            "output_tokens": taken,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        },
    }


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def anthropic_error(message: str, kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
