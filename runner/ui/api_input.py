"""What the HTTP API accepts: request bodies read within a size limit and parsed as JSON,
each field checked for its type, run ids and positions checked before any query.

Every refusal is an `ApiError` (a status and one line saying what is wrong), which the API
answers as `{"error": ...}`: a hostile request gets a 4xx, never a traceback or a 500.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from starlette.requests import Request

from runner.core.budgets import Budgets
from runner.service.runner_base import RUN_ID_PATTERN

# The largest request body read (a task is text; 1 MiB of it is a long one).
MAX_BODY_BYTES = 1 << 20
# Positions are a run's sequence numbers: a 32-bit integer in both databases' columns.
MAX_POSITION = 2**31 - 1
# The longest idempotency key taken (a UUID is 36 characters; a hash in hex 64).
MAX_KEY_LENGTH = 200
BUDGET_NAMES = frozenset(field.name for field in fields(Budgets))


class ApiError(Exception):
    """A request the API refuses: `status` (4xx) and a message for the caller."""

    def __init__(self, status: int, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail


async def json_body(request: Request) -> dict[str, Any]:
    """The request's body as a JSON object: 413 past MAX_BODY_BYTES (read no further), 415
    unless it says it is JSON, 400 unless it parses to an object. An empty body is `{}`."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise ApiError(413, f"the body must be at most {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise ApiError(413, f"the body must be at most {MAX_BODY_BYTES} bytes")
    if not body.strip():
        return {}
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(415, "the body must be JSON (Content-Type: application/json)")
    try:
        parsed = json.loads(bytes(body), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {_first_line(exc)}") from None
    if not isinstance(parsed, dict):
        raise ApiError(400, f"the body must be a JSON object, not {_json_type(parsed)}")
    return parsed


def only(body: Mapping[str, Any], allowed: set[str]) -> None:
    """400 naming the first field of `body` that is not one of `allowed`."""
    for name in body:
        if name not in allowed:
            raise ApiError(400, f"unknown field {name!r}; allowed: {', '.join(sorted(allowed))}")


def text(body: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    """Field `name` as a string (None if absent or null, unless `required`)."""
    value = body.get(name)
    if value is None:
        if required:
            raise ApiError(400, f"{name!r} is required")
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name!r} must be a string, not {_json_type(value)}")
    if "\x00" in value:
        raise ApiError(400, f"{name!r} must not contain a NUL character")
    return value


def whole(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name!r} must be a whole number, not {_json_type(value)}")
    if abs(value) > MAX_POSITION:
        raise ApiError(400, f"{name!r} must be between {-MAX_POSITION} and {MAX_POSITION}")
    return value


def seconds(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ApiError(400, f"{name!r} must be a number of seconds, not {_json_type(value)}")
    if value < 0:
        raise ApiError(400, f"{name!r} must not be negative")
    return float(value)


def budgets(body: Mapping[str, Any]) -> dict[str, Any]:
    """The `budgets` object: known names only, each checked as the library checks it."""
    given = body.get("budgets")
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ApiError(400, f"'budgets' must be an object, not {_json_type(given)}")
    for name, value in given.items():
        if name not in BUDGET_NAMES:
            raise ApiError(
                400, f"unknown budget {name!r}; known: {', '.join(sorted(BUDGET_NAMES))}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ApiError(400, f"budget {name!r} must be finite")
    try:
        Budgets(**given)  # checks each value's type and range, as a run would
    except (TypeError, ValueError) as exc:
        raise ApiError(400, f"bad budgets: {_first_line(exc)}") from None
    return dict(given)


def run_id(given: str) -> str:
    """A run id from a path: 404 for anything that cannot be one (no query is made)."""
    if not RUN_ID_PATTERN.fullmatch(given):
        raise ApiError(404, "no such run")
    return given


def run_id_for_key(key: str) -> str:
    """The run an idempotency key names: the key itself when it is a valid run id, else
    `k` and the first 31 hex digits of its SHA-256 (a UUID is 36 characters, one too many
    for a run id). The same key always names the same run."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable() or not key.isascii():
        raise ApiError(
            400, f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters"
        )
    if RUN_ID_PATTERN.fullmatch(key):
        return key
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:31]


def position(given: str | None, name: str) -> int | None:
    """A position from a header or the query (None if absent or empty): -1 (before the
    first) or more."""
    if given is None or not given.strip():
        return None
    value = given.strip()
    if not (value.isascii() and (value.isdigit() or (value[:1] == "-" and value[1:].isdigit()))):
        raise ApiError(400, f"{name} must be a whole number of -1 or more")
    if len(value) > 10 or not -1 <= int(value) <= MAX_POSITION:
        raise ApiError(400, f"{name} must be between -1 and {MAX_POSITION}")
    return int(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
