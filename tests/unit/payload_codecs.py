"""Codecs the payload tests share: a user's own (zlib), the key rings of two keys, and the
three built-in kinds in every order."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path

from runner.store.blobs import blob_store
from runner.store.encryption import KeyRing
from runner.store.offload import Offload
from runner.store.payloads import Codec, Encoded, Header

KEY_A = ("a", bytes(range(32)))
KEY_B = ("b", bytes(range(32, 64)))


def keys_text(*keys: tuple[str, bytes]) -> str:
    return ",".join(f"{key_id}:{base64.b64encode(key).decode()}" for key_id, key in keys)


class Squeeze:
    """A user's codec: zlib, for values worth it."""

    name = "zlib"

    def encode(self, data: bytes) -> Encoded | None:
        return Encoded(zlib.compress(data), {}) if len(data) > 8 else None

    def decode(self, data: bytes, header: Header) -> bytes:
        return zlib.decompress(data)


def squeeze() -> Codec:
    return Squeeze()


def offload(folder: Path | str, min_bytes: int = 16) -> Offload:
    """Offload to a folder, or to memory (`memory://name`) where a file's fsync is no part
    of what a test checks."""
    url = folder if isinstance(folder, str) else folder.resolve().as_uri()
    return Offload(blob_store(url), min_bytes)


def ring(*keys: tuple[str, bytes]) -> KeyRing:
    return KeyRing(list(keys or (KEY_A,)))
