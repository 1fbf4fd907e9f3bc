"""Offload to S3-compatible object storage (`s3://bucket/prefix`, through boto3), against a
local server that speaks the S3 wire protocol (moto's, started here on a free port: no
network): a run's large payloads go to the bucket and come back; a sweep deletes only the
blobs no row names."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner import Runner
from runner.store.blobs import S3Blobs, blob_store
from tests.conditions import wait_until

from .payload_agents import REF, SECRET

BUCKET = "runner-blobs"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def answers() -> bool:
            with socket.socket() as client:
                return client.connect_ex(("127.0.0.1", port)) == 0

        wait_until(answers, what="the S3 server")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = f"s3://{BUCKET}/runs"
    store = blob_store(url)
    assert isinstance(store, S3Blobs)
    store._client = None  # a client of this endpoint
    store.client.create_bucket(Bucket=BUCKET)
    return url


def test_large_payloads_go_to_the_bucket_and_come_back(
    s3: str, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNER_BLOBS", s3)
    monkeypatch.setenv("RUNNER_OFFLOAD_BYTES", "1000")
    store = blob_store(s3)
    orphan = "0" * 64
    store.put(orphan, b"left by a crash")
    with Runner(db_url) as runner:
        result = runner.run(REF, "look 3000", id="s3")
        assert result.output == f"answer: found {SECRET} 1" + "x" * 4
        assert "x" * 3000 in runner.journal("s3")[-2].content
        listed = {blob.sha256 for blob in store.blobs()}
        assert len(listed) == 3  # two results and the orphan
        swept = runner.store.sweep_blobs(datetime.now(UTC) + timedelta(minutes=1))
        assert swept.blobs == 1 and {blob.sha256 for blob in store.blobs()} == listed - {orphan}
        assert "x" * 3000 in runner.journal("s3")[-2].content
