"""A local fake provider speaking OpenAI's Chat Completions wire format, with a limit.

Run by benchmarks/limits.py as its own process, reached through the real `openai` SDK. It
enforces `--tokens-per-minute` and `--requests-per-minute` over a sliding minute, as a
provider does: a request that would go over is answered 429 with `Retry-After` (seconds
until enough of the minute ages out), and charges nothing. A request's tokens are its prompt
(its messages' text at four characters a token, 4 a message for framing) plus `--completion`
(what it answers with). Each run's model asks for `echo` until it has `--calls - 1` results,
then answers. `--latency` seconds per answer, as a model takes. It prints one JSON line of
what it saw when stopped (SIGTERM): accepted calls and their tokens with the time of each,
and the 429s.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Window:
    """What the minute up to now has charged, and when a request may come in."""

    def __init__(self, tokens_per_minute: int | None, requests_per_minute: int | None) -> None:
        self.tpm, self.rpm = tokens_per_minute, requests_per_minute
        self.charged: deque[tuple[float, int]] = deque()
        self.accepted: list[tuple[float, int]] = []
        self.refused: list[float] = []
        self.lock = threading.Lock()

    def admit(self, tokens: int) -> float | None:
        """None if the request is let in (and charged), else the seconds to wait."""
        with self.lock:
            now = time.time()
            while self.charged and self.charged[0][0] <= now - 60:
                self.charged.popleft()
            used = sum(t for _, t in self.charged)
            waits = []
            if self.tpm is not None and used + tokens > self.tpm:
                freed, need = 0, used + tokens - self.tpm
                for at, t in self.charged:
                    freed += t
                    if freed >= need:
                        waits.append(at + 60 - now)
                        break
                else:
                    waits.append(60.0)
            if self.rpm is not None and len(self.charged) + 1 > self.rpm:
                waits.append(self.charged[len(self.charged) - self.rpm][0] + 60 - now)
            if waits:
                self.refused.append(now)
                return max(max(waits), 0.0)
            self.charged.append((now, tokens))
            self.accepted.append((now, tokens))
            return None


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """As a tokenizer counts, roughly: the text of each message (and of its tool calls) at
    four characters a token, and 4 tokens of framing a message."""
    text = sum(
        len(str(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or ""))
        for m in messages
    )
    return math.ceil(text / 4) + 4 * len(messages)


def handler(window: Window, calls: int, completion: int, latency: float) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            messages = body["messages"]
            prompt = prompt_tokens(messages)
            wait = window.admit(prompt + completion)
            if wait is not None:
                self.send(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                          {"Retry-After": f"{math.ceil(wait)}"})  # fmt: skip
                return
            time.sleep(latency)
            done = sum(1 for m in messages if m["role"] == "tool")
            usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}  # fmt: skip
            if done >= calls - 1:
                message: dict[str, Any] = {"role": "assistant", "content": f"done {done}"}
                finish = "stop"
            else:
                arguments = json.dumps({"i": done})
                call = {"id": f"call_{done}", "type": "function",
                        "function": {"name": "echo", "arguments": arguments}}  # fmt: skip
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls"
            self.send(200, {
                "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "bench-model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            })  # fmt: skip

        def send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(raw)

    return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens-per-minute", type=int, default=None)
    p.add_argument("--requests-per-minute", type=int, default=None)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--completion", type=int, default=300)
    p.add_argument("--latency", type=float, default=0.2)
    options = p.parse_args()
    window = Window(options.tokens_per_minute, options.requests_per_minute)
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0),
        handler(window, options.calls, options.completion, options.latency),
    )
    server.daemon_threads = True
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    stop.wait()
    server.shutdown()
    with window.lock:
        json.dump({"accepted": window.accepted, "refused": window.refused}, sys.stdout)
    print(flush=True)


if __name__ == "__main__":
    main()
