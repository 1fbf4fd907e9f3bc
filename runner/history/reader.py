"""What both read-only query connections share: the result, and the words of a refusal."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from runner.errors import QueryFailed

# Rows fetched from the database at a time: memory holds one batch, whatever the result.
FETCH = 500


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
