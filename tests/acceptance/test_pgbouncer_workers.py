"""`runner worker` processes through PgBouncer in transaction pooling mode (the direct URL,
for their LISTEN, from RUNNER_DIRECT_DATABASE_URL): a queue drained, and a worker killed
with SIGKILL whose runs the others take over, as tests/acceptance/test_workers.py has them
on the server itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.defaults import DIRECT_URL_VARIABLE
from tests.conftest import fresh_database
from tests.servers import Pooled

from . import test_workers
from .test_workers import Cluster

pytestmark = pytest.mark.postgres


@pytest.fixture
def pooled_cluster(
    request: pytest.FixtureRequest,
    pgbouncer: Pooled,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Cluster]:
    for _ in fresh_database(request, "postgres", tmp_path):
        pass
    monkeypatch.setenv(DIRECT_URL_VARIABLE, pgbouncer.direct)  # the workers inherit it
    workers = Cluster(pgbouncer.url, tmp_path)
    try:
        yield workers
    finally:
        workers.close()


def test_a_worker_drains_the_queue_through_pgbouncer(pooled_cluster: Cluster) -> None:
    worker = pooled_cluster.start("--concurrency", "2")
    assert "woken by NOTIFY" in worker.log()  # it LISTENs, on the server itself
    ids = pooled_cluster.submit("final", 4)
    rows = pooled_cluster.wait_finished(ids, timeout=60)
    assert {str(row.stop_reason) for row in rows.values()} == {"final"}
    assert worker.stop() == 0, worker.log()


def test_a_sigkilled_workers_runs_are_taken_over_through_pgbouncer(
    pooled_cluster: Cluster,
) -> None:
    test_workers.test_sigkilled_worker_runs_are_finished_by_the_others(pooled_cluster)
