"""The key ring's operations for the faces: a new key, a rotation (runner.store.encryption)."""

from __future__ import annotations

from runner.store.encryption import KeyRing, new_key


def new_key_line(key_id: str) -> str:
    """A new key as RUNNER_KEYS holds it, `KEY_ID:KEY` (RequestRefused for an id the ring
    would not read)."""
    KeyRing.check_id(key_id)
    return f"{key_id}:{new_key()}"
