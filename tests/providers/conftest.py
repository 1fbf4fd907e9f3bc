"""Fixtures for the adapter tests: a fake provider server, and the loop's retry waits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runner.core.clock import SYSTEM
from tests.providers.fake_servers import FakeServer, serving

KEY = "test-key-3f9c1b7d"  # never a real key: the fake servers accept anything


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serving() as fake:
        yield fake


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The loop's waits between model retries, recorded instead of slept."""
    taken: list[float] = []
    monkeypatch.setattr(SYSTEM, "sleep", taken.append)  # every default clock sleeps here
    yield taken
