"""The offload codec: a payload from a size on goes to a blob store, named by its sha256;
the row keeps the reference (the store's URL, the hash, the size).

The blob is written, durably, inside `encode`: before the row that names it exists. A crash
between the two leaves a blob no row names, which a sweep (runner.store.blob_sweep) deletes
once its grace is past; never a row that names nothing.
"""

from __future__ import annotations

import hashlib

from runner.core.faults import fault
from runner.errors import PayloadError
from runner.store.blobs import BlobStore, blob_store
from runner.store.codec import Encoded, Header


class Offload:
    """Payloads of `min_bytes` or more to `store` (a reader alone has no store: it reads
    from the store each reference names)."""

    name = "blob"

    def __init__(self, store: BlobStore | None, min_bytes: int) -> None:
        self.store = store
        self.min_bytes = min_bytes

    @classmethod
    def reader(cls) -> Offload:
        return cls(None, 0)

    def encode(self, data: bytes) -> Encoded | None:
        if self.store is None or len(data) < self.min_bytes:
            return None
        sha256 = hashlib.sha256(data).hexdigest()
        self.store.put(sha256, data)
        fault("after_blob_write")  # the blob durable, no row names it yet
        return Encoded(b"", {"store": self.store.url, "sha256": sha256, "size": len(data)})

    def decode(self, data: bytes, header: Header) -> bytes:
        sha256 = str(header.get("sha256"))
        blob = blob_store(str(header.get("store"))).get(sha256)
        if hashlib.sha256(blob).hexdigest() != sha256:
            raise PayloadError(f"the blob sha256 {sha256} in {header.get('store')} is damaged")
        return blob
