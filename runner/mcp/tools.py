"""`mcp_tools`: the tools of one MCP server as a dict of runner tools."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from runner.core.tools import Tool
from runner.errors import MissingExtra
from runner.mcp.connection import Connection, Server
from runner.mcp.results import observation_of
from runner.mcp.settlement import call_meta, needs_approval, settlement_of

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


def mcp_tools(
    command: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    prefix: str = "",
    idempotent: Mapping[str, bool] | None = None,
    approval: bool | str | Collection[str] = False,
    timeout: float | None = None,
) -> dict[str, Tool]:
    """The tools of one MCP server, by name, for `Agent(model, {**mcp_tools(...), ...})`.

    The server is `command` (a program speaking MCP on stdio, started with the SDK's safe
    environment, PATH and HOME among it, and `env` over it) or `url` (streamable HTTP, sent
    `headers`). Its tools are listed now, and named
    `prefix` + their MCP name; each keeps the server's description and input schema. A
    call goes over one session per process, opened when first needed and again after it
    broke; it carries its idempotency key in `_meta` (`KEY_META`), the same on every
    attempt.

    After a crash, a call that may have run is settled as the tool's annotations say:
    read-only or idempotent tools run again with the same key; any other (destructive, or
    not annotated) gives the model an `OutcomeUnknown` error. `idempotent={"name": True}`
    overrides that per tool (by its MCP name). `approval` makes calls wait for a person
    first: True (every tool), "destructive" (those MCP reads as destructive) or MCP names.
    `timeout` is each call's limit in seconds (the run's `tool_timeout` otherwise).
    """
    try:
        import mcp  # noqa: F401 - only to say what to install
    except ModuleNotFoundError:
        raise MissingExtra(
            "runner.mcp needs the mcp SDK: pip install 'durable-runner[mcp]'"
        ) from None
    server = Server(
        command=None if command is None else tuple(command),
        env=env,
        url=url,
        headers=headers,
    )
    if isinstance(command, str):
        raise ValueError("command must be a list of strings, e.g. ['python', 'server.py']")
    connection = Connection(server)
    listed = connection.list_tools()
    names = {tool.name for tool in listed}
    unknown = sorted(set(idempotent or {}) - names)
    if not isinstance(approval, bool | str):
        unknown += sorted(set(approval) - names)
    if unknown:
        raise ValueError(
            f"the MCP server {server.label} has no tool {', '.join(unknown)} "
            f"(it lists {', '.join(sorted(names)) or 'none'})"
        )
    tools: dict[str, Tool] = {}
    for listing in listed:
        name = (prefix + _NOT_A_NAME.sub("_", listing.name))[:64]
        if name in tools:
            raise ValueError(f"two tools of {server.label} are both named {name!r} in runner")
        tools[name] = _tool(connection, listing, idempotent or {}, approval, timeout)
    return tools


def _tool(
    connection: Connection,
    listing: Any,
    idempotent: Mapping[str, bool],
    approval: bool | str | Collection[str],
    timeout: float | None,
) -> Tool:
    mcp_name: str = listing.name
    definition = listing.model_dump(mode="json", by_alias=True, exclude_none=True)
    annotations = definition.get("annotations")
    settlement = settlement_of(annotations, idempotent.get(mcp_name))

    async def call(**arguments: Any) -> str:
        return observation_of(await connection.call(mcp_name, arguments, call_meta()))

    call.__name__ = call.__qualname__ = _NOT_A_NAME.sub("_", mcp_name)
    call.__doc__ = listing.description or listing.title or f"The {mcp_name} tool of an MCP server."
    schema = dict(definition.get("inputSchema") or {"type": "object", "properties": {}})
    return Tool(
        call,
        idempotent=settlement.idempotent,
        timeout=timeout,
        schema=schema,
        approval=needs_approval(mcp_name, settlement, approval),
        # A cancel or a graceful stop gives the request up (the SDK tells the server).
        interruptible=True,
        # What the server says of the tool, not how it is reached: a server moved to another
        # path or port with the same tools is the same listing.
        listing={
            "name": mcp_name,
            "description": definition.get("description"),
            "inputSchema": definition.get("inputSchema"),
            "annotations": annotations,
        },
    )
