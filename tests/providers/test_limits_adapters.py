"""Provider limits through the real SDKs, on SQLite and PostgreSQL: an adapter's calls draw
from `provider/model` by default and are settled with the usage the provider reported, and a
429 with Retry-After from the provider backs the limit off for every worker."""

from __future__ import annotations

from datetime import timedelta

from runner import Agent, Runner
from runner.models import OpenAIChat
from tests.providers.conftest import KEY
from tests.providers.fake_servers import FakeServer, openai_completion, openai_error


def test_an_adapter_draws_from_provider_model_and_settles_its_usage(
    db_url: str, server: FakeServer
) -> None:
    model = OpenAIChat("gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY, price=(0.4, 1.6))
    assert model.limit == "openai/gpt-4.1-mini"
    assert OpenAIChat("x", api_key=KEY, limit="pool").limit == "pool"
    server.reply(openai_completion("35", usage=(120, 30, 0)))
    with Runner(db_url) as runner:
        runner.set_limit("openai/gpt-4.1-mini", tokens_per_minute=10_000)
        assert runner.run(Agent(model), "What is 5 * 7?").output == "35"
        [info] = runner.limits()
        assert (info.tokens, info.requests, info.in_flight) == (150, 1, 0)


def test_a_429_with_retry_after_backs_the_limit_off_for_every_worker(
    db_url: str, server: FakeServer, waits: list[float]
) -> None:
    server.reply(
        openai_error("Rate limit reached", "requests", "rate_limit_exceeded"),
        status=429,
        headers={"Retry-After": "30"},
    )
    model = OpenAIChat("gpt-4.1-mini", base_url=f"{server.url}/v1", api_key=KEY, price=(0.4, 1.6))
    with Runner(db_url) as runner:
        runner.set_limit("openai/gpt-4.1-mini", requests_per_minute=100)
        told = runner.run(Agent(model, model_retries=0), "What is 5 * 7?")
        assert told.stop_reason == "model_error"
        [info] = runner.limits()
        # Shared in the database: every worker's next reservation waits until then.
        assert info.backoff_until is not None
        assert info.backoff_until >= runner.now() + timedelta(seconds=25)
        assert (info.requests, info.tokens) == (1, 0)
