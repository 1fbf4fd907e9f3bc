"""Codecs: what encryption and offload cost a durable step, as a ratio to plain payloads.

    .venv/bin/python benchmarks/codecs.py [--steps 100] [--sizes 1024,16384,65536,262144]
                                          [--repeats 3] [--no-postgres] [--json out.json]

For each observation size, one durable run of `--steps` steps with the zero-cost model
(benchmarks/fakes.py's `read`: every step's observation that many bytes), in four ways:
`plain` (no codec), `encrypted` (AES-256-GCM, runner.store.encryption), `offloaded` (every
payload of 1 KiB or more to a blob folder beside the SQLite file, fsynced; on PostgreSQL to a
scratch folder) and `both`. Time per step is the run's wall time over its steps (median of
the repeats); the ratio is each way's time over plain's at the same size. Offloaded at every
size, it shows where a blob's own write costs less than carrying the payload in its row:
the grounds for the default offload size (runner.store.payload_config).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

import common
import fakes

from runner import Runner
from runner.sql.store import SqlStore
from runner.store.blobs import blob_store
from runner.store.encryption import KeyRing, new_key
from runner.store.offload import Offload
from runner.store.payloads import Codec, Payloads

RING = KeyRing.parse(f"bench:{new_key()}", source="benchmark")


def chain(way: str, blobs: Path) -> Payloads:
    codecs: list[Codec] = []
    if way in ("encrypted", "both"):
        codecs.append(RING)
    if way in ("offloaded", "both"):
        codecs.append(Offload(blob_store(blobs.resolve().as_uri()), 1024))
    return Payloads(codecs)


def per_step(url: str, way: str, blobs: Path, steps: int, size: int) -> tuple[float, int]:
    """Seconds per step of one run, and the database's bytes per step (SQLite: the file
    after a checkpoint; 0 on PostgreSQL, whose pages this does not measure)."""
    store = SqlStore(url, payloads=chain(way, blobs))
    with Runner(store=store) as runner:
        started = time.perf_counter()
        result = runner.run(fakes.REF, fakes.task(steps, size), **fakes.UNLIMITED)
        seconds = time.perf_counter() - started
    store.close()
    store.engine.dispose()
    stored = 0
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        connection = sqlite3.connect(path)
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.close()
        stored = os.path.getsize(path)
    assert result.stop_reason == "final", result.stop_reason
    return seconds / result.steps, stored // result.steps


def blob_writes(folder: Path, sizes: list[int], count: int = 30) -> list[dict[str, Any]]:
    """Microseconds one blob write takes (a file written, fsynced, renamed, its folder
    fsynced): what offload adds to a step, besides the smaller row."""
    store = blob_store((folder / "writes").resolve().as_uri())
    found = []
    for size in sizes:
        times = []
        for i in range(count):
            data = os.urandom(size)
            started = time.perf_counter()
            store.put(hashlib.sha256(data).hexdigest(), data)
            times.append(time.perf_counter() - started)
            del i
        found.append({"size": size, "us_per_blob": statistics.median(times) * 1e6})
    return found


WAYS = ("plain", "encrypted", "offloaded", "both")


def measure(urls: dict[str, Any], folder: Path, options: Any) -> list[dict[str, Any]]:
    found = []
    for backend, make_url in urls.items():
        for size in options.sizes:
            times: dict[str, list[float]] = {way: [] for way in WAYS}
            stored: dict[str, int] = {}
            for repeat in range(options.repeats):
                for way in WAYS:  # interleaved: a busy moment spreads over every way
                    url = make_url(f"{way}-{size}-{repeat}")
                    seconds, stored[way] = per_step(
                        url, way, folder / f"blobs-{way}", options.steps, size
                    )
                    times[way].append(seconds)
            plain = statistics.median(times["plain"])
            for way in WAYS:
                ms = statistics.median(times[way]) * 1000
                found.append(
                    {"backend": backend, "size": size, "way": way, "ms_per_step": ms,
                     "ratio": ms / (plain * 1000), "db_bytes_per_step": stored[way]}
                )  # fmt: skip
    return found


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--sizes", default="4096,65536,262144")
    p.add_argument("--repeats", type=int, default=3)
    options = p.parse_args()
    options.sizes = [int(s) for s in options.sizes.split(",")]
    with common.scratch_folder(options.dir) as folder:
        urls: dict[str, Any] = {"sqlite": lambda name: common.sqlite_url(folder, name)}
        postgres = common.postgres_url_or_none(options)
        if postgres is None:
            found = measure(urls, folder, options)
        else:
            with common.scratch_postgres(postgres) as pg_url:
                urls["postgresql"] = lambda name: pg_url
                found = measure(urls, folder, options)
        writes = blob_writes(folder, options.sizes)
    rows = [
        (r["backend"], f"{r['size']:,}", r["way"], f"{r['ms_per_step']:.2f}", f"{r['ratio']:.2f}x",
         f"{r['db_bytes_per_step']:,}" if r["db_bytes_per_step"] else "-")
        for r in found
    ]  # fmt: skip
    common.print_table(
        f"ms per step over {options.steps} steps (median of {options.repeats}), ratio to plain",
        ("backend", "observation bytes", "way", "ms/step", "vs plain", "db bytes/step"),
        rows,
    )
    common.print_table(
        "one blob written to a folder (median of 30)",
        ("bytes", "us/blob"),
        [(f"{w['size']:,}", f"{w['us_per_blob']:.0f}") for w in writes],
    )
    common.write_json(options.json, "codecs", options, {"steps": found, "blob_writes": writes})


if __name__ == "__main__":
    main()
