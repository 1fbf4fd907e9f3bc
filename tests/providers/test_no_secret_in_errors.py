"""No secret leaves an adapter in an error's words, whatever path the error takes.

A provider (or a gateway in front of it) may echo the key in any error: with a 4xx or 5xx,
in a body of status 200, in a body that is not JSON, cut short, URL-encoded. Hypothesis
tries the paths of both adapters with keys given as `api_key=`, through the environment,
as a configured secret and in a header; the run's error (what runs.error, `runner show`,
exports and spans repeat) never holds the key or a long start of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runner import Agent, Runner, run_agent
from runner.cli import main
from runner.models import AnthropicMessages, OpenAIChat
from runner.models.adapter import Adapter
from tests.providers.fake_servers import FakeServer, serving

KEY_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+/="
keys = st.text(alphabet=KEY_CHARACTERS, min_size=16, max_size=64)
STATUSES = [200, 400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 529]
ENVIRONMENT = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def echoes(key: str) -> list[str]:
    """How a server may repeat a key."""
    return [key, key[: len(key) * 2 // 3] + "...", quote(key, safe=""), f"Bearer {key}"]


def bodies(provider: str, words: str) -> list[bytes]:
    """Error bodies of each shape the two wire formats and odd servers give."""
    if provider == "openai":
        shaped: Any = {"error": {"message": words, "type": "invalid_request_error"}}
    else:
        shaped = {"type": "error", "error": {"type": "authentication_error", "message": words}}
    return [
        json.dumps(shaped).encode(),
        json.dumps({"error": words}).encode(),
        json.dumps({"message": words}).encode(),
        json.dumps(words).encode(),
        words.encode(),
        b'{"choices": [' + words.encode(),
    ]


def adapter(provider: str, url: str, key: str, how: str) -> Adapter:
    kind: Callable[..., Adapter]
    if provider == "openai":
        kind, base = OpenAIChat, f"{url}/v1"
    else:
        kind, base = AnthropicMessages, url
    if how == "api_key":
        return kind("m", base_url=base, api_key=key)
    if how == "secrets":
        return kind("m", base_url=base, api_key="other-key", secrets=[key])
    if how == "header":
        return kind("m", base_url=base, api_key="other-key", extra_headers={"X-Gateway-Token": key})
    return kind("m", base_url=base)  # from the environment


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeServer]:
    with serving() as fake:
        yield fake


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    provider=st.sampled_from(["openai", "anthropic"]),
    key=keys,
    how=st.sampled_from(["api_key", "environment", "secrets", "header"]),
    status=st.sampled_from(STATUSES),
    echo=st.integers(0, 3),
    shape=st.integers(0, 5),
)
def test_no_error_path_repeats_the_key(
    shared_server: FakeServer,
    provider: str,
    key: str,
    how: str,
    status: int,
    echo: int,
    shape: int,
) -> None:
    words = f"Invalid key {echoes(key)[echo]} given."
    shared_server.reply(bodies(provider, words)[shape], status=status)
    variable = ENVIRONMENT[provider]
    saved = os.environ.get(variable)
    os.environ[variable] = key if how == "environment" else "unrelated-environment-key"
    try:
        model = adapter(provider, shared_server.url, key, how)
        try:
            result = run_agent(model, {}, "task", model_retries=0)
        finally:
            model.close()
    finally:
        if saved is None:
            del os.environ[variable]
        else:
            os.environ[variable] = saved
    assert result.stop_reason == "model_error"
    error = result.error or ""
    assert key not in error and key[:8] not in error, error


def test_spans_hold_no_error_words(server: FakeServer) -> None:
    key = "sk-live-9a8b7c6d5e4f3a2b1c0d"
    server.reply({"error": {"message": f"bad key {key}"}})
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = OpenAIChat("m", base_url=f"{server.url}/v1", api_key=key)
    try:
        with Runner("sqlite://", tracer_provider=provider) as runner:
            runner.run(Agent(model, {}, model_retries=0), "task", id="spanned")
    finally:
        model.close()
    spans = exporter.get_finished_spans()
    assert spans
    for span in spans:
        dumped = span.to_json()
        assert key not in dumped and "bad key" not in dumped, dumped


def test_a_durable_run_keeps_no_key_anywhere(db_url: str, server: FakeServer) -> None:
    """A 200 with an error body echoing the key: runs.error, show and export hold none."""
    key = "gw-token-5f4e3d2c1b0a99887766"
    for _ in range(3):
        server.reply({"error": {"message": f"upstream refused key {key}"}})
    model = OpenAIChat("m", base_url=f"{server.url}/v1", api_key=key)
    try:
        with Runner(db_url) as runner:
            result = runner.run(Agent(model, {}, model_retries=2, retry_backoff=0), "t", id="k")
    finally:
        model.close()
    assert result.stop_reason == "model_error" and "[redacted]" in (result.error or "")
    for args in (["show", "k"], ["show", "k", "--json"], ["export"], ["list"]):
        shown = CliRunner().invoke(main, [*args, "--db", db_url], catch_exceptions=False)
        assert shown.exit_code == 0, shown.output
        assert key not in shown.output and key[:8] not in shown.output, args


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_header_that_authenticates_is_a_secret_whatever_the_case_of_its_name(
    server: FakeServer, provider: str
) -> None:
    """Header names are case-insensitive on the wire: AUTHORIZATION, X-Api-Key and
    x-session-TOKEN authenticate as their lower-case forms do, and their values are kept
    out of an error that echoes them."""
    values = {
        "AUTHORIZATION": "Token tok9f8e7d6c5b4a3",
        "X-Api-Key": "gw4k3y2x1w0v9u8",
        "x-session-TOKEN": "sess7a6b5c4d3e2f",
    }
    echoed = " ".join(values.values())
    server.reply(bodies(provider, f"refused {echoed}")[0], status=400)
    kind: Callable[..., Adapter] = OpenAIChat if provider == "openai" else AnthropicMessages
    base = f"{server.url}/v1" if provider == "openai" else server.url
    model = kind("m", base_url=base, api_key="other-key-000", extra_headers=dict(values))
    try:
        result = run_agent(model, {}, "task", model_retries=0)
    finally:
        model.close()
    assert result.stop_reason == "model_error"
    for secret in ("tok9f8e7d6c5b4a3", "gw4k3y2x1w0v9u8", "sess7a6b5c4d3e2f"):
        assert secret not in (result.error or ""), result.error
