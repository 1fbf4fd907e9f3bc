"""What an MCP tool's annotations say of a call a crash interrupted, in runner's terms.

MCP's hints (`readOnlyHint`, `idempotentHint`, `destructiveHint`) are a server's word on
what a second call does. Read-only or idempotent: a second call with the same arguments has
no further effect, so an interrupted call runs again with the same key. Anything else
(destructive, or silent, which MCP reads as destructive) is never run twice without a
person: the model is told the outcome is unknown. A user's word per tool overrides both.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from runner.core.tools import current_call

# The `_meta` entries every call carries, so a server that honours them can deduplicate a
# call run again after a crash: the same key on every attempt of one call.
KEY_META = "runner/idempotency-key"
RUN_META = "runner/run-id"
ATTEMPT_META = "runner/attempt"


def call_meta() -> dict[str, Any]:
    """The `_meta` entries of the tool call running in this context (its key, run and
    attempt); empty outside a runner call."""
    now = current_call()
    if now is None:
        return {}
    return {KEY_META: now.idempotency_key, RUN_META: now.run_id, ATTEMPT_META: now.attempt}


@dataclass(frozen=True)
class Settlement:
    """How one MCP tool is declared to the runner."""

    idempotent: bool  # an interrupted call runs again with the same key
    destructive: bool  # by MCP's reading: may destroy or overwrite (approval can be asked)


def settlement_of(
    annotations: Mapping[str, Any] | None, override: bool | None = None
) -> Settlement:
    """The settlement of a tool with these annotations (MCP's defaults when absent):
    `override` (the user's `idempotent=` for this tool) decides retries when given."""
    hints = dict(annotations or {})
    read_only = hints.get("readOnlyHint") is True
    idempotent = read_only or hints.get("idempotentHint") is True
    # MCP: destructiveHint is meaningful only when readOnlyHint is false; its default is true.
    destructive = not read_only and hints.get("destructiveHint") is not False
    return Settlement(idempotent if override is None else override, destructive)


def needs_approval(
    name: str, settlement: Settlement, approval: bool | str | Collection[str]
) -> bool:
    """Whether calls of tool `name` wait for a person: `approval` is True (all), False
    (none), "destructive" (those MCP reads as destructive) or a collection of names."""
    if isinstance(approval, bool):
        return approval
    if isinstance(approval, str):
        if approval != "destructive":
            raise ValueError(
                f'approval must be True, False, "destructive" or tool names, not {approval!r}'
            )
        return settlement.destructive
    return name in approval
