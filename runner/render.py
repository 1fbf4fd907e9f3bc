"""How runs look in a terminal and in JSON (for `show`, `list`, `run --json`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from runner.result import AgentResult
from runner.store import RunRow

_WIDTH = 100  # observation texts are cut to this in the terminal; --json has them whole


# The fields an AgentResult and a RunRow share, under the same names.
_OUTCOME = ("status", "stop_reason", "output", "steps", "tokens", "cost", "error", "wrapped_up")


def run_json(
    result: AgentResult | None, row: RunRow | None = None, *, transcript: bool = False
) -> dict[str, Any]:
    """The machine-readable form of a run."""
    data: dict[str, Any] = {}
    # How the run ended (or stands): from the result when there is one, else from the row.
    source = result if result is not None else row
    if source is not None:
        data["id"] = result.run_id if result is not None else row.id if row else None
        data.update({name: getattr(source, name) for name in _OUTCOME})
    if row is not None:
        data.update(
            agent=row.agent,
            agent_name=row.agent_name,
            release=row.release,
            task=row.task,
            budgets=row.budgets,
            resumes=row.resumes,
            cancel_requested=row.cancel_requested,
            worker=row.lease_owner,
            worker_since=_iso(row.leased_at) if row.lease_owner else None,
            lease_expires_at=_iso(row.lease_expires_at),
            created_at=_iso(row.created_at),
            finished_at=_iso(row.finished_at),
        )
    if transcript and result is not None:
        data["transcript"] = result.transcript
    return data


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _cut(text: str, width: int = _WIDTH) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def render_run(result: AgentResult, row: RunRow) -> str:
    """A readable transcript with the run's header."""
    lines = [
        f"run       {row.id}",
        f"agent     {row.agent or '-'}"
        + (f"  ({row.agent_name}, release {row.release})" if row.agent_name else ""),
        f"status    {row.status}" + (f": {row.stop_reason}" if row.stop_reason else ""),
        f"counters  {result.steps} steps, {result.tokens} tokens, cost {result.cost:g}, "
        f"{row.resumes} resumes",
        f"created   {_when(row.created_at)} UTC"
        + (f", finished {_when(row.finished_at)} UTC" if row.finished_at else ""),
    ]
    if row.lease_owner:
        lines.append(f"worker    {row.lease_owner} since {_when(row.leased_at)} UTC")
    if row.error:
        lines.append(f"error     {row.error}")
    lines.append("")
    lines.extend(_message_line(message) for message in result.transcript)
    lines.extend(_ending(result, row))
    return "\n".join(lines)


# What each stop means, and the budget whose limit it names (shown with the limit's value).
_STOPS = {
    "final": ("answered", None),
    "max_steps": ("gave up: the step cap was reached", "max_steps"),
    "token_budget": ("gave up: the tokens spent went over the budget", "max_tokens"),
    "cost_budget": ("gave up: the cost spent went over the budget", "max_cost"),
    "time_budget": ("gave up: the wall-clock budget ran out", "max_seconds"),
    "repeated_call": ("looped: the same tool call, same arguments, too many times", "max_repeats"),
    "tool_errors": ("too many failed steps in a row", "max_consecutive_errors"),
    "cancelled": ("cancelled on request", None),
    "model_error": ("the model kept failing after its retries", None),
    "crash_loop": ("given up: the run kept killing its worker", None),
}


def _ending(result: AgentResult, row: RunRow) -> list[str]:
    """How the transcript ends: the stop and what it means, or the call still in flight."""
    last = result.transcript[-1] if result.transcript else None
    if row.stop_reason is None:
        if last is not None and "tool" in last and last["role"] == "assistant":
            return [f"  .. {last['tool']}: no result yet (running, or a resume will settle it)"]
        return []
    meaning, budget = _STOPS.get(str(row.stop_reason), (str(row.stop_reason), None))
    if budget is not None and row.budgets.get(budget) is not None:
        meaning += f" ({budget}={row.budgets[budget]})"
    if row.wrapped_up:
        meaning += "; the answer came from the wrap-up call"
    return ["", f"stopped   {row.stop_reason}: {meaning}"]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _message_line(message: dict[str, Any]) -> str:
    role = message["role"]
    if role == "user":
        return f"user      {_cut(_text(message['content']))}"
    if role == "tool":
        mark = "error" if message["is_error"] else "ok"
        return f"  <- {message['name']} [{mark}]  {_cut(_text(message['content']))}"
    if "tool" in message:
        return f"  -> {message['tool']}({_cut(json.dumps(message['args']), 80)})"
    if "invalid" in message:
        return f"  -> (invalid output) {_cut(_text(message['invalid']))}"
    # The answer is what the run is for: shown whole, continuation lines indented.
    return "answer    " + _text(message["content"]).replace("\n", "\n          ")


def runs_table(rows: Sequence[RunRow]) -> str:
    if not rows:
        return "no runs"
    header = ("ID", "STATUS", "STOP", "STEPS", "TOKENS", "AGENT", "RELEASE", "CREATED", "WORKER")
    table = [header]
    for row in rows:
        worker = f"{row.lease_owner} since {_when(row.leased_at)}" if row.lease_owner else "-"
        table.append(
            (
                row.id,
                str(row.status),
                str(row.stop_reason or "-"),
                str(row.steps),
                str(row.tokens),
                row.agent_name or (row.agent or "-"),
                row.release or "-",
                _when(row.created_at),
                worker,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )
