"""Encryption at rest: a key ring whose newest key encrypts and any key decrypts (AES-256-GCM
through `cryptography`: `pip install durable-runner[encryption]`).

Keys come from the environment, never from the database: RUNNER_KEYS holds `id:key` pairs,
comma-separated, oldest first, each key 32 bytes in base64 (`runner keys new` makes one);
RUNNER_KEY_FILE names a file of the same pairs, one a line (`#` comments). The newest (the
last) encrypts. A value's envelope names the key id it was encrypted with; reading it with a
ring that lacks that id, or holds another key of that id, is a KeyMissing naming the id.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path
from typing import Any

from runner.errors import KeyMissing, MissingExtra, RequestRefused
from runner.store.codec import Encoded, Header

KEYS_VARIABLE = "RUNNER_KEYS"
KEY_FILE_VARIABLE = "RUNNER_KEY_FILE"
_NONCE = 12


def new_key() -> str:
    """A fresh key, as RUNNER_KEYS writes it (32 random bytes, base64)."""
    return base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _aead(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise MissingExtra(
            "encryption needs cryptography: pip install 'durable-runner[encryption]'"
        ) from None
    return AESGCM(key)


class KeyRing:
    """The codec `aes-gcm`: `keys` in order, oldest first; the last encrypts."""

    name = "aes-gcm"

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise RequestRefused("a key ring needs one key at least")
        self.keys = dict(keys)
        if len(self.keys) != len(keys):
            raise RequestRefused("a key ring names one key id twice")
        self.newest = keys[-1][0]
        self._ciphers = {key_id: _aead(key) for key_id, key in keys}

    @staticmethod
    def check_id(key_id: str) -> str:
        """A key id as the ring reads it: letters, digits, `-` and `_`."""
        if not key_id or not key_id.replace("-", "").replace("_", "").isalnum():
            raise RequestRefused(f"a key id is letters, digits, - and _, not {key_id!r}")
        return key_id

    @classmethod
    def parse(cls, text: str, *, source: str) -> KeyRing:
        """A ring from `id:key` pairs (comma- or line-separated; `#` starts a comment)."""
        pairs: list[tuple[str, bytes]] = []
        for item in text.replace("\n", ",").split(","):
            item = item.split("#", 1)[0].strip()
            if not item:
                continue
            key_id, colon, encoded = item.partition(":")
            key_id = key_id.strip()
            if not colon or not key_id or not key_id.replace("-", "").replace("_", "").isalnum():
                # Never the key itself in the message: only what stands before its colon.
                raise RequestRefused(f"{source}: a key is `id:base64`, not {key_id[:20]!r}:...")
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except binascii.Error:
                raise RequestRefused(f"{source}: key {key_id} is not base64") from None
            if len(key) != 32:
                raise RequestRefused(f"{source}: key {key_id} is {len(key)} bytes, not 32")
            pairs.append((key_id, key))
        return cls(pairs)

    @classmethod
    def from_environment(cls, *, required: bool = False) -> KeyRing | None:
        """RUNNER_KEYS, else the file RUNNER_KEY_FILE names, else None."""
        text = os.environ.get(KEYS_VARIABLE)
        if text:
            return cls.parse(text, source=KEYS_VARIABLE)
        path = os.environ.get(KEY_FILE_VARIABLE)
        if path:
            try:
                content = Path(path).read_text()
            except OSError as exc:
                raise RequestRefused(f"{KEY_FILE_VARIABLE}: cannot read {path}: {exc}") from None
            return cls.parse(content, source=path)
        if required:
            raise RequestRefused(f"no key ring: set {KEYS_VARIABLE} or {KEY_FILE_VARIABLE}")
        return None

    def encode(self, data: bytes) -> Encoded:
        nonce = secrets.token_bytes(_NONCE)
        # The key id is authenticated with the value: an envelope edited to name another
        # key fails, it does not decrypt into something else.
        sealed = self._ciphers[self.newest].encrypt(nonce, data, self.newest.encode())
        return Encoded(nonce + sealed, {"key": self.newest})

    def decode(self, data: bytes, header: Header) -> bytes:
        key_id = str(header.get("key"))
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise KeyMissing(
                f"a stored value is encrypted with key {key_id}, which the key ring does not "
                f"hold (it holds {', '.join(self.keys)}): add it to {KEYS_VARIABLE} or "
                f"{KEY_FILE_VARIABLE}"
            )
        from cryptography.exceptions import InvalidTag

        try:
            return bytes(cipher.decrypt(data[:_NONCE], data[_NONCE:], key_id.encode()))
        except InvalidTag:
            raise KeyMissing(
                f"a stored value does not decrypt with key {key_id}: the key ring's key "
                f"{key_id} is not the one it was encrypted with (or the value is damaged)"
            ) from None
