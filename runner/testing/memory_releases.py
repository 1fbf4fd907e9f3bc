"""The in-memory store's releases: a queue's policy for runs of another release, a failed
check's parking, and each release's unfinished runs (runner.sql.releases in SQL)."""

from __future__ import annotations

from datetime import datetime

from runner.core.status import RunStatus
from runner.store.releases import (
    OlderReleases,
    ReleaseInfo,
    Releases,
    check_policy,
    may_take,
)
from runner.store.rows import RunRow, plain_text
from runner.store.rules import check_queue
from runner.testing.memory_rows import MemoryRows, Row


class MemoryReleases(MemoryRows):
    """The in-memory store's releases."""

    def set_older_releases(self, name: str, policy: OlderReleases) -> None:
        check_queue(name)
        chosen = check_policy(policy)
        with self._lock:
            self.older_releases[name] = chosen

    def park_run(self, run_id: str, epoch: int, reason: str, error: str) -> bool:
        with self._lock:
            row = self.runs.get(run_id)
            if row is None or row["lease_epoch"] != epoch or row["status"] != RunStatus.RUNNING:
                return False
            row.update(
                status=RunStatus.QUEUED,
                lease_owner=None,
                lease_expires_at=None,
                parked_reason=reason,
                error=plain_text(error),
                updated_at=self._now(),
            )
        return True

    def list_releases(self, now: datetime) -> list[ReleaseInfo]:
        counts: dict[tuple[str | None, str | None], list[int]] = {}
        with self._lock:
            for row in self.runs.values():
                status = row["status"]
                if status == RunStatus.FINISHED:
                    continue
                mine = counts.setdefault((row["agent_name"], row["release"]), [0] * 5)
                parked = row.get("parked_reason") is not None
                if status == RunStatus.RUNNING:
                    mine[0] += 1
                elif status == RunStatus.WAITING:
                    mine[2] += 1
                elif parked or (row["not_before"] is not None and row["not_before"] > now):
                    mine[3] += 1
                else:
                    mine[1] += 1
                mine[4] += parked
        found = [ReleaseInfo(name, release, *n) for (name, release), n in counts.items()]
        return sorted(found, key=lambda info: (info.agent_name or "", info.release or ""))

    def recorded_runs(
        self, *, since: datetime | None, agent: str | None, limit: int
    ) -> list[RunRow]:
        with self._lock:
            found = [
                RunRow.of(row)
                for row in self.runs.values()
                if row["status"] == RunStatus.FINISHED
                and row["agent"] is not None
                and (agent is None or row["agent"] == agent)
                and (since is None or row["finished_at"] >= since)
            ]
        found.sort(key=lambda run: (run.finished_at, run.id), reverse=True)
        return found[:limit]

    def queue_policy(self, name: str) -> OlderReleases:
        with self._lock:
            return self._policy(name)

    def _policy(self, queue: str) -> OlderReleases:
        return self.older_releases.get(queue, OlderReleases.CONTINUE)

    def _may_take(self, row: Row, releases: Releases | None) -> bool:
        """Whether a claimer of `releases` may take `row` (runner.store.releases)."""
        if releases is None:
            return True
        return may_take(
            releases,
            agent=row["agent"],
            run_release=row["release"],
            policy=self._policy(row["queue"]),
            parked=row.get("parked_reason") is not None,
        )
