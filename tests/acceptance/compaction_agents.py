"""A reading agent that compacts, and the local fake provider it talks to over HTTP (it
answers in runner's own action shape: no provider SDK to load, so each `runner` process
starts fast): the agent is loaded by reference in a `runner` subprocess, the server runs in
the test's process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runner import Agent, Compaction
from runner.core.compaction import INSTRUCTIONS

URL_VARIABLE = "RUNNER_TEST_READER_URL"
PAGES = 6
PAGE = "lorem ipsum " * 150  # about 450 tokens a page


def read(page: int) -> str:
    return f"page {page}: {PAGE}"


def reader() -> Agent:
    """Reads pages 1..PAGES; the view passes 1,200 tokens at its third page."""
    url = os.environ[URL_VARIABLE]

    def model(transcript: list[dict[str, Any]]) -> Any:
        body = json.dumps({"messages": transcript}).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    return Agent(
        model,
        {"read": read},
        name="compacting-reader",
        context=Compaction(above_tokens=1_200, keep_steps=1),
        max_steps=20,
        max_tokens=None,
        max_repeats=None,
        model_retries=0,
    )


class ReaderProvider:
    """Answers the reader: the next page's call, or the answer after the last; a summary
    request with the pages it covers. Counts each kind of request; `hold` (when given)
    keeps summary requests unanswered until it is set."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.summaries: list[str] = []
        self.asked: list[list[dict[str, Any]]] = []  # the reader's requests' messages
        self.hold = hold
        self.lock = threading.Lock()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        text = " ".join(str(m.get("content") or "") for m in messages)
        pages = [int(n) for n in re.findall(r"page (\d+)", text)]
        done = max(pages, default=0)
        last = str(messages[-1].get("content") or "")
        if last.startswith(INSTRUCTIONS):
            with self.lock:
                self.summaries.append(last)
            if self.hold is not None:
                self.hold.wait()
            answer: dict[str, Any] = {"type": "final", "content": f"read to page {done}"}
        else:
            with self.lock:
                self.asked.append(messages)
            if done >= PAGES:
                answer = {"type": "final", "content": "read them all"}
            else:
                answer = {"type": "tool", "name": "read", "args": {"page": done + 1}}
        # As a provider counts: the prompt at four characters a token, and the answer.
        return answer | {"usage": {"tokens": len(text) // 4 + 20, "cost": 0.001}}


@contextmanager
def serving(provider: ReaderProvider) -> Iterator[str]:
    """The provider on a free local port: its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                raw = json.dumps(provider.answer(body)).encode()
            except Exception:
                raw = b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client was killed while it waited
                self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if provider.hold is not None:
            provider.hold.set()
        server.shutdown()
        server.server_close()
