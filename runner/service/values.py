"""The values the service hands the faces: a run as stored (`RunRow`), a queue and what it
holds (`QueueInfo`), and whether a running run has stalled (derived when read, never stored).
None of them loads SQLAlchemy: `runner list` and `show` print them on their fast path."""

from __future__ import annotations

from runner.store.liveness import is_stalled, stall_reason
from runner.store.rows import QueueInfo, RunRow

__all__ = ["QueueInfo", "RunRow", "is_stalled", "stall_reason"]
