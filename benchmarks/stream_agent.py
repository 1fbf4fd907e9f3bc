"""The agent of benchmarks/delta_latency.py: OpenAIChat streaming from the benchmark's fake
server (RUNNER_BENCH_STREAM_URL), no tools: one streamed call, then the answer."""

from __future__ import annotations

import os

from runner import Agent
from runner.models import OpenAIChat


def agent() -> Agent:
    url = os.environ["RUNNER_BENCH_STREAM_URL"]
    model = OpenAIChat("bench", base_url=f"{url}/v1", api_key="k", stream=True)
    return Agent(model, {}, name="delta-latency")
