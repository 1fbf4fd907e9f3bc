"""Doubling waits with a cap: the one backoff every retry in runner uses."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass
class Backoff:
    """`next()` gives first, 2*first, 4*first, ... never more than `cap`; `reset()` restarts.

    With `jitter`, each wait is drawn between half of that and all of it, so that many
    processes that lost the same database do not all knock at the same instant when it
    comes back."""

    first: float
    cap: float = math.inf
    jitter: bool = False
    _tries: int = 0

    def next(self) -> float:
        delay = min(self.cap, math.ldexp(self.first, self._tries))
        self._tries += 1
        return delay * random.uniform(0.5, 1.0) if self.jitter else delay

    @property
    def current(self) -> float:
        """The last wait given, or 0 before the first."""
        return 0.0 if self._tries == 0 else min(self.cap, math.ldexp(self.first, self._tries - 1))

    def reset(self) -> None:
        self._tries = 0
