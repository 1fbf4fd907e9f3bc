"""What an engine does inside a block, counted: its commits, its statements.

Each yields a one-item list holding the count so far, read once the block has ended."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event


@contextmanager
def commits(engine: Engine) -> Iterator[list[int]]:
    """The commits made on `engine` inside the block."""
    with _counting(engine, "commit") as counted:
        yield counted


@contextmanager
def statements(engine: Engine) -> Iterator[list[int]]:
    """The statements run on `engine` inside the block (BEGIN and COMMIT are not
    statements here: the driver runs them)."""
    with _counting(engine, "before_cursor_execute") as counted:
        yield counted


@contextmanager
def _counting(engine: Engine, name: str) -> Iterator[list[int]]:
    counted = [0]

    def count(*_args: Any) -> None:
        counted[0] += 1

    event.listen(engine, name, count)
    try:
        yield counted
    finally:
        event.remove(engine, name, count)
