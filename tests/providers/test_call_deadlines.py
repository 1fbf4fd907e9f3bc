"""No model call without a deadline: a provider that sends its headers and then one byte
now and then never trips a read timeout; the adapter's total_timeout gives the call up,
and a cancel reaches a call in flight (on both databases)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runner import Agent, Runner, run_agent
from runner.models import AnthropicMessages, OpenAIChat
from runner.models.adapter import Adapter
from tests.providers.conftest import KEY

DRIP_EVERY = 0.5  # seconds between two bytes of the body
DRIPS_AT_MOST = 240  # the server stops by itself after this many (two minutes)


class DripServer:
    """Answers 200 with headers at once, then one byte of the body every DRIP_EVERY s."""

    def __init__(self) -> None:
        self.started = threading.Event()  # a request came and its headers went out
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(DRIPS_AT_MOST))
                self.end_headers()
                self.wfile.flush()
                server.started.set()
                for _ in range(DRIPS_AT_MOST):
                    if server.stop.wait(DRIP_EVERY):
                        return
                    try:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    except OSError:
                        return  # the client gave up and hung up

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host}:{port}"


@pytest.fixture
def drip() -> Iterator[DripServer]:
    server = DripServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.http.shutdown()
        server.http.server_close()


def adapter(provider: str, url: str, total_timeout: float | None) -> Adapter:
    if provider == "openai":
        return OpenAIChat("m", base_url=f"{url}/v1", api_key=KEY, total_timeout=total_timeout)
    return AnthropicMessages("m", base_url=url, api_key=KEY, total_timeout=total_timeout)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_dripping_answer_is_given_up_at_the_total_timeout(
    drip: DripServer, provider: str
) -> None:
    model = adapter(provider, drip.url, total_timeout=1.5)
    try:
        result = run_agent(model, {}, "task", model_retries=0)
    finally:
        model.close()
    assert result.stop_reason == "model_error"
    assert "longer than its total_timeout, 1.5 s" in (result.error or ""), result.error


def test_every_call_has_a_total_timeout_by_default() -> None:
    model = OpenAIChat("m", api_key=KEY)
    assert model.total_timeout == 600.0
    with pytest.raises(ValueError, match="total_timeout"):
        OpenAIChat("m", api_key=KEY, total_timeout=float("inf"))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_cancel_reaches_a_call_in_flight(db_url: str, drip: DripServer, provider: str) -> None:
    model = adapter(provider, drip.url, total_timeout=None)  # no deadline at all
    results: list[Any] = []
    try:
        with Runner(db_url, heartbeat_seconds=0.2) as runner:
            running = threading.Thread(
                target=lambda: results.append(
                    runner.run(Agent(model, {}, model_retries=0), "task", id="dripping")
                )
            )
            running.start()
            assert drip.started.wait(60)
            with Runner(db_url) as other:
                other.cancel("dripping")
            running.join(60)
            assert not running.is_alive()
    finally:
        model.close()
    assert results[0].stop_reason == "cancelled"
