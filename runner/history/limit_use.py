"""What each provider limit has charged over the last minute, read for the page (`/limits`):
the same count a reservation checks (runner.sql.limits), on the page's read-only engine."""

from __future__ import annotations

from sqlalchemy import Engine

from runner.core.clock import SYSTEM, utc_now
from runner.sql.limits import list_limits
from runner.store.rows import LimitInfo


def limit_use(engine: Engine) -> list[LimitInfo]:
    """Every limit, by name, with its use over the minute up to now."""
    return list_limits(engine, utc_now(SYSTEM))
