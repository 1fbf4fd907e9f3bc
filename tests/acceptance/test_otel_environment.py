"""Traces from the command line, by OpenTelemetry's standard variables and real exporters:
`runner run` with OTEL_TRACES_EXPORTER=console prints its spans on stderr, and `runner worker`
with only OTEL_EXPORTER_OTLP_ENDPOINT sends them over OTLP/HTTP to a collector this test
serves; both in the run's own trace."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from runner import Runner
from runner.tracing.otel import run_context

from .harness import RUNNER, TIMEOUT, described

CALCULATOR = f"{Path(__file__).parents[2] / 'examples' / 'calculator.py'}:agent"
STEP_SPANS = ["chat", "execute_tool add", "step 1", "chat", "execute_tool multiply", "step 2",
              "chat", "step 3", "invoke_agent calculator"]  # fmt: skip


def env_with(db_url: str, **otel: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "OTEL_", "CALCULATOR"))
    }
    return {**env, "RUNNER_DATABASE_URL": db_url, **otel}


def console_spans(stderr: str) -> list[dict[str, Any]]:
    """The JSON objects ConsoleSpanExporter wrote among the other lines of stderr."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (at := stderr.find("{\n", at)) != -1:
        span, at = decoder.raw_decode(stderr, at)
        spans.append(span)
    return spans


def test_run_prints_its_spans_with_the_console_exporter(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'runner.db'}"
    done = subprocess.run(
        [str(RUNNER), "run", CALCULATOR, "What is (2 + 3) * 7?", "--id", "traced-cli"],
        env=env_with(db_url, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="calc-cli"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, described(done)
    assert done.stdout == "35\n"  # the spans keep off stdout
    spans = console_spans(done.stderr)
    assert [span["name"] for span in spans] == STEP_SPANS, done.stderr
    trace_id = f"0x{run_context('traced-cli').trace_id:032x}"
    assert {span["context"]["trace_id"] for span in spans} == {trace_id}
    assert {span["resource"]["attributes"]["service.name"] for span in spans} == {"calc-cli"}


class Collector:
    """An OTLP/HTTP trace receiver on a local port: what each export request carried."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    received.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[str, bytes, dict[str, Any]]]:
        """(name, trace id, resource attributes) of every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    found.extend((span.name, span.trace_id, resource) for span in scope.spans)
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    served = Collector()
    try:
        yield served
    finally:
        served.close()


def test_worker_exports_over_otlp_to_the_endpoint_given(
    collector: Collector, tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'runner.db'}"
    with Runner(db_url) as runner:
        runner.submit(CALCULATOR, "What is (2 + 3) * 7?", id="traced-worker")
    done = subprocess.run(
        [str(RUNNER), "worker", "--once"],
        env=env_with(db_url, OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, described(done)
    spans = collector.spans()
    assert [name for name, _, _ in spans] == STEP_SPANS, done.stderr
    trace_id = run_context("traced-worker").trace_id.to_bytes(16, "big")
    assert {trace for _, trace, _ in spans} == {trace_id}
    assert {resource["service.name"] for _, _, resource in spans} == {"runner"}
