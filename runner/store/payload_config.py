"""The codecs a store writes its payloads through, from arguments or the environment.

The order is fixed where it matters: a user's own codecs first (they see the plain bytes),
then encryption, then offload last, so that an offloaded blob holds what encryption made of
the value (an encrypted store keeps no plain payload anywhere) and the row keeps only the
blob's reference.

Environment (each overridden by the argument of the same meaning):
- RUNNER_CODECS: user codecs, comma-separated `module:attr` references (a Codec, or a
  zero-argument callable returning one).
- RUNNER_KEYS or RUNNER_KEY_FILE: the key ring (runner.store.encryption).
- RUNNER_BLOBS: where offloaded payloads go (`file:///path`, `s3://bucket/prefix`, `off`);
  unset: a folder beside a SQLite file (`runner.db` -> `runner.db.blobs/`), none otherwise.
- RUNNER_OFFLOAD_BYTES: the size from which a payload is offloaded (DEFAULT_OFFLOAD_BYTES).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path

from runner.errors import RequestRefused
from runner.store.payloads import Codec, Payloads

CODECS_VARIABLE = "RUNNER_CODECS"
BLOBS_VARIABLE = "RUNNER_BLOBS"
OFFLOAD_VARIABLE = "RUNNER_OFFLOAD_BYTES"
# 64 KiB: below it a payload costs less in its row than as a blob (an extra file and fsync,
# or an S3 round trip: docs/performance/storage.md measures both); above it rows grow with the
# payload, and tool results of tens or hundreds of KB are what make long runs heavy.
DEFAULT_OFFLOAD_BYTES = 64 * 1024


def configured(
    database_url: str,
    *,
    codecs: Sequence[Codec] | None = None,
    blobs: str | None = None,
    offload_bytes: int | None = None,
    keys: str | None = None,
) -> Payloads:
    """The store's codecs for the database at `database_url` (see the module's docstring)."""
    chain: list[Codec] = list(codecs) if codecs is not None else environment_codecs()
    from runner.store.encryption import KeyRing

    ring = KeyRing.parse(keys, source="keys") if keys is not None else KeyRing.from_environment()
    if ring is not None:
        chain.append(ring)
    where = blobs if blobs is not None else os.environ.get(BLOBS_VARIABLE) or beside(database_url)
    if where and where != "off":
        from runner.store.blobs import blob_store
        from runner.store.offload import Offload

        chain.append(Offload(blob_store(where), offload_size(offload_bytes)))
    return Payloads(chain)


def offload_size(given: int | None = None) -> int:
    if given is not None:
        return given
    text = os.environ.get(OFFLOAD_VARIABLE)
    if not text:
        return DEFAULT_OFFLOAD_BYTES
    try:
        value = int(text)
    except ValueError:
        raise RequestRefused(
            f"{OFFLOAD_VARIABLE} must be a number of bytes, not {text!r}"
        ) from None
    if value < 1:
        raise RequestRefused(f"{OFFLOAD_VARIABLE} must be 1 or more, not {value}")
    return value


def beside(database_url: str) -> str | None:
    """The default blob folder of a database: `<file>.blobs` beside a SQLite file."""
    for scheme in ("sqlite:///", "sqlite+pysqlite:///"):
        if database_url.startswith(scheme):
            path = database_url[len(scheme) :].split("?", 1)[0]
            if not path or path == ":memory:":
                return None
            return Path(path + ".blobs").resolve().as_uri()
    return None


def environment_codecs() -> list[Codec]:
    text = os.environ.get(CODECS_VARIABLE, "").strip()
    return [load_codec(ref.strip()) for ref in text.split(",") if ref.strip()]


def load_codec(ref: str) -> Codec:
    """The codec `module:attr` names (or the codec a zero-argument callable there returns)."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise RequestRefused(f"a codec reference must look like module:attr, not {ref!r}")
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RequestRefused(f"cannot load the codec {ref}: {exc}") from None
    if not isinstance(value, Codec) and callable(value):
        value = value()
    if not isinstance(value, Codec):
        raise RequestRefused(f"{ref} is a {type(value).__name__}, not a Codec")
    return value
