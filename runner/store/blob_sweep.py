"""Blobs no row names, deleted: what retention and `runner prune` do after deleting runs.

A blob is written before the row that names it, so between the two a blob is named by no
row: a sweep deletes only blobs last written before `older_than` (retention and prune give
now less BLOB_GRACE_SECONDS), and lists the store's blobs before it reads which are named,
so a blob written meanwhile is never in the list. Content addressing shares a blob between
rows (a fork's copy, the same result twice): it goes only once no row names it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from runner.store.blobs import BlobStore
from runner.store.offload import Offload
from runner.store.payloads import Payloads, blob_references

# An hour: far longer than any write takes from its blob to its row (a commit that waits
# longer has lost its lease), and short enough that a crash's leftovers go the same day.
BLOB_GRACE_SECONDS = 3600.0


@dataclass(frozen=True)
class Swept:
    blobs: int = 0
    bytes: int = 0


def offload_stores(payloads: Payloads) -> list[BlobStore]:
    """The blob stores a store's payloads are offloaded to."""
    return [c.store for c in payloads.codecs if isinstance(c, Offload) and c.store is not None]


def named_blobs(values: Iterable[object]) -> set[tuple[str, str]]:
    """The (store URL, sha256) every stored value among `values` names."""
    named: set[tuple[str, str]] = set()
    for value in values:
        named.update(blob_references(value))
    return named


def sweep(
    stores: Collection[BlobStore],
    older_than: datetime,
    named: Callable[[], set[tuple[str, str]]],
    *,
    dry_run: bool = False,
) -> Swept:
    """Delete the blobs of `stores` last written before `older_than` that no row names
    (`named` reads which rows name, after the blobs are listed)."""
    if not stores:
        return Swept()
    listed = [
        (store, blob) for store in stores for blob in store.blobs() if blob.modified < older_than
    ]
    if not listed:
        return Swept()
    kept = named()
    count = size = 0
    for store, blob in listed:
        if (store.url, blob.sha256) in kept:
            continue
        if not dry_run:
            store.delete(blob.sha256)
        count += 1
        size += blob.size
    return Swept(count, size)
