"""`runner.context`, as the manual imports it: what the model is shown lives in
`runner.core.context`; this module keeps the documented import path working."""

from runner.core.compaction import Compaction
from runner.core.context import Context, compose, cut_observations, last_steps

__all__ = ["Compaction", "Context", "compose", "cut_observations", "last_steps"]
