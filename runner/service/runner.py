"""`Runner`: durable runs in SQLite or PostgreSQL, on the same loop as `run_agent`.

The class is made of parts by responsibility, each in its own module over one base that
holds the store (runner.service.runner_base): queueing runs (`submitting`), driving them in
this process (`resuming`), answering waiting runs (`answering`), sending messages into them
(`messaging`), reading them (`inspecting`), following their journals as events (`events`)
keeping schedules (`scheduling`), the limits model calls draw from (`limiting`) and
releases apart (`releases`). Every
part goes through the store's protocol (runner.store.protocol): a database's `SqlStore` by
default, or the in-memory store of `runner.testing`.
"""

from __future__ import annotations

from runner.defaults import DEFAULT_LEASE_SECONDS as DEFAULT_LEASE_SECONDS  # re-exported
from runner.defaults import DEFAULT_MAX_RESUMES as DEFAULT_MAX_RESUMES  # re-exported
from runner.service.answering import Answering
from runner.service.events import Following
from runner.service.inspecting import Inspecting
from runner.service.limiting import Limiting
from runner.service.messaging import Messaging
from runner.service.releases import Releasing
from runner.service.resuming import Resuming
from runner.service.runner_base import ANSWER_POLL_SECONDS as ANSWER_POLL_SECONDS
from runner.service.runner_base import RUN_ID_PATTERN as RUN_ID_PATTERN
from runner.service.scheduling import Scheduling
from runner.service.scoring import Scoring
from runner.service.submitting import Submitting
from runner.service.tree_events import FollowingTrees


class Runner(
    Submitting,
    Resuming,
    Answering,
    Messaging,
    Inspecting,
    Following,
    FollowingTrees,
    Scheduling,
    Limiting,
    Releasing,
    Scoring,
):
    """Start, resume, inspect and cancel durable runs in one database.

    `Runner(url)` opens the database at `url` (None: RUNNER_DATABASE_URL, else the default
    file); `Runner(store=...)` runs on another store, such as `runner.testing.InMemoryStore`
    for tests with no database. `Runner(url, codecs=[...])` writes every payload through your
    own codecs, then the environment's encryption and offload (docs/guides/payloads.md).
    """

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
