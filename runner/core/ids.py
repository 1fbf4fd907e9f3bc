"""Run ids: short, time-sortable, safe in a shell and a URL."""

from __future__ import annotations

import os
import time

ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford's base 32, lower case


def new_run_id() -> str:
    """Ten characters of milliseconds since the epoch, then six random ones."""
    millis = int(time.time() * 1000)
    head = "".join(ID_ALPHABET[(millis >> shift) & 31] for shift in range(45, -1, -5))
    # os.urandom, not secrets: the same randomness (256 is a multiple of 32, so each byte
    # picks a letter evenly) without loading hashlib and random into every command.
    tail = "".join(ID_ALPHABET[byte & 31] for byte in os.urandom(6))
    return head + tail
