"""Provider limits, as the `Runner` sets, lists and removes them (`runner limit ...`)."""

from __future__ import annotations

from runner.service.runner_base import RunnerBase
from runner.store.rows import LimitInfo


class Limiting(RunnerBase):
    """The `Runner`'s part that keeps the limits model calls draw from."""

    def set_limit(
        self,
        name: str,
        *,
        tokens_per_minute: int | None = None,
        requests_per_minute: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Limit `name` (say `openai/gpt-4.1`) to so many tokens and requests a minute, and
        calls in flight at once, across every worker on every machine (None: not limited by
        that measure). Runs whose agents draw from it reserve before each model call."""
        self.store.set_limit(
            name,
            tokens_per_minute=tokens_per_minute,
            requests_per_minute=requests_per_minute,
            concurrency=concurrency,
        )

    def limits(self) -> list[LimitInfo]:
        """Every limit, with what it charged over the last minute and what is left of it."""
        return self.store.list_limits(self.now())

    def remove_limit(self, name: str) -> None:
        """Remove limit `name` (LimitNotFound if there is none): its calls draw from
        nothing from now on, and the runs in line for it go at their wake-up time."""
        self.store.remove_limit(name)
