"""Fixtures of the unit tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set when the test ends, so that calls the runner abandoned finish promptly."""
    event = threading.Event()
    yield event
    event.set()
