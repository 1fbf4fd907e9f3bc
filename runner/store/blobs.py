"""Blob stores: where offloaded payloads go, each named by its content's sha256.

`memory://name` (this process's memory: tests), `file:///path` (a folder; the default, beside
a SQLite file) and `s3://bucket/prefix` (any
S3-compatible object storage, through boto3: `pip install durable-runner[s3]`; its endpoint
and credentials come from boto3's own settings, e.g. AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID).
A blob is written whole and durable before `put` returns (a file fsynced, then renamed into
place; an object stored once S3 answers), so a row that names it never names nothing.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from runner.errors import MissingExtra, PayloadError, RequestRefused


@dataclass(frozen=True)
class Blob:
    sha256: str
    size: int
    modified: datetime  # when last written (a put of an existing blob renews it)


class BlobStore(Protocol):
    url: str

    def put(self, sha256: str, data: bytes) -> None: ...

    def get(self, sha256: str) -> bytes: ...

    def delete(self, sha256: str) -> None: ...

    def blobs(self) -> Iterator[Blob]: ...


_stores: dict[str, BlobStore] = {}
_lock = threading.Lock()


def blob_store(url: str) -> BlobStore:
    """The blob store at `url` (one object per URL in a process)."""
    with _lock:
        found = _stores.get(url)
        if found is None:
            found = _stores[url] = _open(url)
        return found


def _open(url: str) -> BlobStore:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return FileBlobs(Path(unquote(parsed.path)), url)
    if parsed.scheme == "memory":
        return MemoryBlobs(url)
    if parsed.scheme == "s3" and parsed.netloc:
        return S3Blobs(parsed.netloc, parsed.path.strip("/"), url)
    raise RequestRefused(
        f"a blob store is file:///path, s3://bucket/prefix or memory://name, not {url!r}"
    )


def _missing(url: str, sha256: str) -> PayloadError:
    return PayloadError(f"the blob sha256 {sha256} is missing from {url}")


class FileBlobs:
    """Blobs as files `<folder>/<first 2 hex>/<sha256>`."""

    def __init__(self, folder: Path, url: str) -> None:
        self.folder = folder
        self.url = url

    def _path(self, sha256: str) -> Path:
        if sha256.startswith(_WRITING + "/"):
            return self.folder / sha256
        return self.folder / sha256[:2] / sha256

    def put(self, sha256: str, data: bytes) -> None:
        path = self._path(sha256)
        if path.exists():
            # The same content again: renewed, so a sweep's grace counts from now (the row
            # that names it may not be written yet).
            os.utime(path)
            return
        writing = self.folder / _WRITING
        writing.mkdir(parents=True, exist_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=writing)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        _fsync_folder(path.parent)  # the rename is durable once its folder is

    def get(self, sha256: str) -> bytes:
        try:
            return self._path(sha256).read_bytes()
        except FileNotFoundError:
            raise _missing(self.url, sha256) from None

    def delete(self, sha256: str) -> None:
        self._path(sha256).unlink(missing_ok=True)

    def blobs(self) -> Iterator[Blob]:
        """Every blob, and every write a crash cut short (named `.writing/...`: never
        referenced, so a sweep takes them once their grace is past)."""
        if not self.folder.is_dir():
            return
        for path in [*self.folder.glob("??/*"), *self.folder.glob(f"{_WRITING}/*")]:
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            name = path.name if path.parent.name != _WRITING else f"{_WRITING}/{path.name}"
            yield Blob(name, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC))


_WRITING = ".writing"


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MemoryBlobs:
    """Blobs in this process's memory (`memory://name`): for tests and the in-memory store."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.kept: dict[str, tuple[bytes, datetime]] = {}

    def put(self, sha256: str, data: bytes) -> None:
        self.kept[sha256] = (data, datetime.now(UTC))

    def get(self, sha256: str) -> bytes:
        found = self.kept.get(sha256)
        if found is None:
            raise _missing(self.url, sha256)
        return found[0]

    def delete(self, sha256: str) -> None:
        self.kept.pop(sha256, None)

    def blobs(self) -> Iterator[Blob]:
        for sha256, (data, modified) in list(self.kept.items()):
            yield Blob(sha256, len(data), modified)


class S3Blobs:
    """Blobs as objects `<prefix>/<first 2 hex>/<sha256>` of an S3 bucket."""

    def __init__(self, bucket: str, prefix: str, url: str) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.url = url
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3
            except ImportError:
                raise MissingExtra(
                    "s3:// blob stores need boto3: pip install 'durable-runner[s3]'"
                ) from None
            self._client = boto3.client("s3")
        return self._client

    def _call(self, what: str, method: str, **kwargs: Any) -> Any:
        """One S3 request; its failure (the server away, a refusal) a PayloadError naming the
        store, as a folder's OSError is, never a botocore exception of its own."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
        )

        try:
            return getattr(self.client, method)(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise
            raise PayloadError(f"cannot {what} in {self.url}: {exc}") from None
        except BotoCoreError as exc:
            raise PayloadError(f"cannot {what} in {self.url}: {exc}") from None

    def _key(self, sha256: str) -> str:
        return f"{self.prefix}/{sha256[:2]}/{sha256}" if self.prefix else f"{sha256[:2]}/{sha256}"

    def put(self, sha256: str, data: bytes) -> None:
        self._call(
            "write a blob", "put_object", Bucket=self.bucket, Key=self._key(sha256), Body=data
        )

    def get(self, sha256: str) -> bytes:
        try:
            response = self._call(
                "read a blob", "get_object", Bucket=self.bucket, Key=self._key(sha256)
            )
        except self.client.exceptions.NoSuchKey:
            raise _missing(self.url, sha256) from None
        return bytes(response["Body"].read())

    def delete(self, sha256: str) -> None:
        self._call("delete a blob", "delete_object", Bucket=self.bucket, Key=self._key(sha256))

    def blobs(self) -> Iterator[Blob]:
        from botocore.exceptions import BotoCoreError, ClientError

        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""
        )
        try:
            for page in pages:
                for item in page.get("Contents", ()):
                    yield Blob(item["Key"].rsplit("/", 1)[-1], item["Size"], item["LastModified"])
        except (BotoCoreError, ClientError) as exc:
            raise PayloadError(f"cannot list the blobs of {self.url}: {exc}") from None
