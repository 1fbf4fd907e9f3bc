"""Run ids: short, time-sortable, safe in a shell and a URL."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford's base 32, lower case


def new_run_id() -> str:
    """Ten characters of milliseconds since the epoch, then six random ones."""
    millis = int(time.time() * 1000)
    head = "".join(_ALPHABET[(millis >> shift) & 31] for shift in range(45, -1, -5))
    tail = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    return head + tail
