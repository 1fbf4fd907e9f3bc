"""An agent whose model fails for good (a missing key), named by reference as a worker
loads it (self-contained: the loader imports this file by its path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner import Agent, ModelFatal


def no_key(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    raise ModelFatal("openai: Missing credentials.\nSet OPENAI_API_KEY.")


no_key_agent = Agent(no_key, name="no-key")

NO_KEY = f"{Path(__file__).resolve()}:no_key_agent"
