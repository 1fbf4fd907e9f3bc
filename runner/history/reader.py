"""What both read-only query connections share: the result, and the words of a refusal."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from runner.errors import QueryFailed

# Rows fetched from the database at a time: memory holds one batch, whatever the result.
FETCH = 500

# What `runner sql` gives at most (docs/security.md): one value, and a whole result
# (what a table must hold to lay it out; CSV and JSON stream, yet stop there too). A batch
# of rows is sized to hold about BATCH_BYTES, so memory stays near that whatever a row holds.
MAX_VALUE_BYTES = 16 * 2**20
MAX_RESULT_BYTES = 256 * 2**20
BATCH_BYTES = 8 * 2**20


@dataclass
class QueryResult:
    """The columns of a query and its rows, fetched as they are read."""

    columns: list[str]
    rows: Iterator[tuple[Any, ...]]


# How one database runs a statement read-only: (url, sql, timeout in seconds or None).
Reader = Callable[[str, str, "float | None"], AbstractContextManager[QueryResult]]


def streamed(fetch: Callable[[], Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    """The rows that `fetch` gives a batch at a time (an empty batch: no more).

    The first batch is fetched at once: a query that fails or times out before its first
    row fails here, before the caller has printed anything (not even a CSV header).
    """
    return _batches(fetch(), fetch)


def _batches(batch: Sequence[Any], fetch: Callable[[], Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    while batch:
        yield from (tuple(row) for row in batch)
        batch = fetch()


class Bounds:
    """The deadline and the size limits of one query: the deadline counts from the start,
    executing, fetching and writing rows out alike (the whole command)."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout or None  # 0: no limit
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.taken = 0
        self.rows = 20  # the first batch is small: its rows' size sizes the next ones

    def remaining(self) -> float | None:
        """Seconds left (raises once none are), or None without a deadline."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise timed_out(self.timeout)
        return left

    def over(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def took(self, batch: Sequence[Any]) -> Sequence[Any]:
        """`batch`, counted against the limits; sizes the next batch."""
        size = 0
        for row in batch:
            for value in row:
                n = _size(value)
                if n > MAX_VALUE_BYTES:
                    raise value_too_large(n)
                size += n
        self.taken += size
        if self.taken > MAX_RESULT_BYTES:
            raise QueryFailed(
                f"query stopped: its result is larger than runner sql gives, "
                f"{MAX_RESULT_BYTES // 2**20} MiB: select fewer rows or columns (LIMIT)"
            )
        if batch:
            per_row = max(size // len(batch), 1)
            self.rows = max(1, min(FETCH, BATCH_BYTES // per_row))
        return batch


def value_too_large(size: int | None = None) -> QueryFailed:
    value = "a value" if size is None else f"a value of {size} bytes"
    return QueryFailed(
        f"query stopped: {value} is larger than runner sql gives, "
        f"{MAX_VALUE_BYTES // 2**20} MiB: select part of it (substr, length)"
    )


def _size(value: object) -> int:
    if isinstance(value, str | bytes | bytearray):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    return sys.getsizeof(value)


def read_only(detail: str) -> QueryFailed:
    return QueryFailed(f"refused: runner sql is read-only ({detail})")


def timed_out(timeout: float | None) -> QueryFailed:
    return QueryFailed(f"query stopped: it ran longer than its timeout, {timeout:g} s (--timeout)")


def one_statement() -> QueryFailed:
    return QueryFailed("query failed: runner sql runs one statement at a time")


def failed(exc: BaseException) -> QueryFailed:
    return QueryFailed(f"query failed: {first_line(exc)}")


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
