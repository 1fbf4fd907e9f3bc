"""Tools and what the durable runner needs to know of them.

A tool is any callable (sync or async). The `tool` decorator adds the metadata that decides
what happens to a call whose outcome a crash made unknown: run it again with the same key
(`idempotent`, or a tool taking `idempotency_key`), ask its `reconcile` hook, or tell the
model the outcome is unknown (unless `mark_start` shows it never started); and whether a
call must wait for a person's approval first.

The rest of this feature (docs/architecture.md, "Where a feature lives"):
`runner.core.tool_runs`, `runner.mcp.tools`.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from runner.core.waiting import Asks

KEY_PARAMETER = "idempotency_key"

# reconcile(key, args) -> the call's result if it took effect, or `NOT_APPLIED` if it did not.
Reconcile = Callable[[str, dict[str, Any]], Any]
# approval(args) -> whether this call needs a person's approval before it runs.
Approval = bool | Callable[[dict[str, Any]], bool]


class _NotApplied:
    def __repr__(self) -> str:
        return "NOT_APPLIED"


NOT_APPLIED: Any = _NotApplied()
"""Returned by a reconcile hook when the call never took effect: the runner runs it again."""


@dataclass(frozen=True)
class Tool:
    """A callable with the metadata a durable run needs."""

    fn: Callable[..., Any]
    idempotent: bool = False
    timeout: float | None = None
    reconcile: Reconcile | None = None
    # The JSON schema of the tool's arguments, when its signature cannot say it well enough;
    # model adapters build one from the signature otherwise.
    schema: dict[str, Any] | None = field(default=None, hash=False)
    # Whether a call waits for a person's approval before it runs: always (True), or as a
    # function of the call's arguments says.
    approval: Approval = False
    # A call whose observation is a person's reply, never the function's result (ask_human).
    replies: bool = False
    # Journal a `start` entry just before each call (one more write per call): a call that
    # a crash left pending without it never started, and runs on resume instead of being
    # reported OutcomeUnknown. For tools that are neither idempotent nor reconcilable.
    mark_start: bool = False
    # The Agent a call of this tool runs as a child run (`Agent.as_tool`): in a durable run
    # the call starts a child run and waits for its end; in memory the child runs inline.
    sub_agent: Any = field(default=None, hash=False, compare=False)
    # What the server providing this tool listed for it (an MCP tool's definition, plain
    # JSON): journaled once per run, and a resume that finds it changed stops the run with
    # `tools_changed` (runner.core.listings). None for the tools a run's own code defines.
    listing: Any = field(default=None, hash=False, compare=False)
    # A call given up as soon as its run is cancelled (the model is told so) or paused by a
    # graceful stop (the call stays pending, settled on resume as after a crash), as a model
    # call is. For async tools whose work can be cancelled (an MCP request); a plain tool
    # runs to its end, and the run stops after it.
    interruptible: bool = False
    # `takes_key`, read from the signature at its first use (a worker asks at each run's
    # first call of the tool: `inspect` costs more than the rest of an in-memory step).
    _takes_key: bool | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.approval, bool) and not callable(self.approval):
            raise ValueError(
                f"tool approval must be True, False or a function of the call's arguments, "
                f"not {self.approval!r}"
            )
        if self.schema is not None and not isinstance(self.schema, dict):
            raise ValueError(f"tool schema must be a dict (a JSON schema), not {self.schema!r}")
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not self.timeout > 0
        ):
            raise ValueError(f"tool timeout must be a number of seconds > 0, not {self.timeout!r}")

    @property
    def takes_key(self) -> bool:
        """Whether the tool declares an `idempotency_key` parameter."""
        known = self._takes_key
        if known is None:
            try:
                known = KEY_PARAMETER in inspect.signature(self.fn).parameters
            except (TypeError, ValueError):
                known = False
            object.__setattr__(self, "_takes_key", known)  # frozen: `fn` never changes
        return known

    @property
    def retry_safe(self) -> bool:
        """Whether a call with an unknown outcome may simply run again with the same key."""
        return self.idempotent or self.takes_key

    def asks(self, args: dict[str, Any] | None) -> Asks | None:
        """What a person must answer before this call runs, or None to run it at once."""
        if self.replies:
            return Asks.REPLY
        if isinstance(self.approval, bool):
            return Asks.APPROVAL if self.approval else None
        try:
            needed = self.approval(dict(args or {}))
        except Exception:
            return Asks.APPROVAL  # a rule that cannot decide asks: it never waves a call on
        return Asks.APPROVAL if needed else None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    idempotent: bool = False,
    timeout: float | None = None,
    reconcile: Reconcile | None = None,
    schema: dict[str, Any] | None = None,
    approval: Approval = False,
    mark_start: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    idempotent: bool = False,
    timeout: float | None = None,
    reconcile: Reconcile | None = None,
    schema: dict[str, Any] | None = None,
    approval: Approval = False,
    mark_start: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool: `@tool`, or `@tool(idempotent=True, timeout=5, reconcile=check)`.

    `schema` is the JSON schema of the tool's arguments that model adapters send, in place of
    the one they would build from its signature. `approval=True` makes every call wait for a
    person's approval before it runs (in a durable run); `approval=fn` only the calls for
    which `fn(args)` is true (a rule that raises asks too). `mark_start=True` journals that
    a call is about to start (one more write per call), so a call a crash left pending that
    never started runs on resume rather than being reported `OutcomeUnknown`.
    """

    def wrap(inner: Callable[..., Any]) -> Tool:
        return Tool(
            inner,
            idempotent=idempotent,
            timeout=timeout,
            reconcile=reconcile,
            schema=schema,
            approval=approval,
            mark_start=mark_start,
        )

    return wrap(fn) if fn is not None else wrap


def as_tools(tools: Mapping[str, Callable[..., Any]]) -> dict[str, Tool]:
    return {name: fn if isinstance(fn, Tool) else Tool(fn) for name, fn in tools.items()}


@dataclass(frozen=True)
class ToolCall:
    """Where the running tool call stands: readable from inside any tool."""

    run_id: str
    step: int
    attempt: int
    idempotency_key: str


_current: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "runner_tool_call", default=None
)


def current_call() -> ToolCall | None:
    """The tool call being executed in this context, or None outside a tool."""
    return _current.get()


def set_current_call(call: ToolCall | None) -> contextvars.Token[ToolCall | None]:
    return _current.set(call)


def reset_current_call(token: contextvars.Token[ToolCall | None]) -> None:
    _current.reset(token)
