"""Agents whose adapters stream, against the test's fake provider at RUNNER_TEST_STREAM_URL
(loaded by reference in a `runner` subprocess)."""

from __future__ import annotations

import os

from runner import Agent
from runner.models import AnthropicMessages, OpenAIChat

URL_VARIABLE = "RUNNER_TEST_STREAM_URL"


def openai() -> Agent:
    url = os.environ[URL_VARIABLE]
    model = OpenAIChat("gpt-4.1-mini", base_url=f"{url}/v1", api_key="k", stream=True)
    return Agent(model, {}, name="streaming-openai")


def anthropic() -> Agent:
    url = os.environ[URL_VARIABLE]
    model = AnthropicMessages("claude-haiku-4-5", base_url=url, api_key="k", stream=True)
    return Agent(model, {}, name="streaming-anthropic")
