"""The tool listings a run started with (what an MCP server listed for each of its tools),
journaled once at step 0 and checked on every resume: a server that changed its tools
since is named (`tools_changed`), never silently called with other tools."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner.core.counters import Counters
from runner.core.journal import Entry, EntryKind
from runner.core.tools import Tool


def listings_of(tools: Mapping[str, Tool]) -> dict[str, Any]:
    """The listing of each tool that has one, by the name the run calls it."""
    return {name: tool.listing for name, tool in tools.items() if tool.listing is not None}


def listings_entry(listings: Mapping[str, Any], counters: Counters) -> Entry:
    return Entry(
        EntryKind.TOOLS,
        0,
        counters,
        content=f"{len(listings)} listed tool(s): {', '.join(sorted(listings))}",
        args=dict(listings),
    )


def listings_change(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """What differs between the listings a run started with and today's, in words; None if
    nothing does. Compared as canonical JSON: the journal hands back what JSON kept."""
    gone = sorted(set(recorded) - set(now))
    added = sorted(set(now) - set(recorded))
    changed = sorted(
        name
        for name in set(recorded) & set(now)
        if _canonical(recorded[name]) != _canonical(now[name])
    )
    if not (gone or added or changed):
        return None
    parts = [
        f"{what}: {', '.join(names)}"
        for what, names in (("gone", gone), ("new", added), ("changed", changed))
        if names
    ]
    return "the tools' server lists them differently than when the run started (" + (
        "; ".join(parts) + ")"
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
