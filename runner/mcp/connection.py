"""One MCP server's session in this process: opened when first needed, opened again after
it broke (the server crashed, the connection dropped) or in a forked child.

The session lives on an event loop of its own, on a thread of its own: the SDK's session
must be entered and left by one task, which a call's task (on runner's loop, cancelled at
its time limit) cannot be. Calls from any thread or loop are handed to it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from runner.errors import MCPUnavailable
from runner.mcp.results import MCPToolError

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult, RequestParamsMeta

T = TypeVar("T")

# Seconds a listing may take (the server started, the session opened, the tools listed).
LIST_SECONDS = 60.0
# Seconds to let a session close at exit before the process goes.
CLOSE_SECONDS = 5.0


@dataclass(frozen=True)
class Server:
    """Where an MCP server is: a command speaking stdio, or a streamable HTTP URL."""

    command: tuple[str, ...] | None = None
    env: Mapping[str, str] | None = field(default=None, hash=False)
    url: str | None = None
    headers: Mapping[str, str] | None = field(default=None, hash=False, repr=False)

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server is a command=[...] (stdio) or a url=... (HTTP)")
        if self.command is not None and (
            not self.command or not all(isinstance(part, str) for part in self.command)
        ):
            raise ValueError(f"an MCP server's command must be a list of strings: {self.command}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"an MCP server's url must be http:// or https://, not {self.url!r}")

    @property
    def label(self) -> str:
        """The server as the journal and errors name it."""
        return self.url if self.url is not None else " ".join(self.command or ())


class Connection:
    """The session with one server, for every tool of it in this process."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # On the session's loop alone: the session being opened or open, and what closes it.
        self._session: asyncio.Future[Client] | None = None
        self._closing: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        _SESSIONS.add(self)

    def list_tools(self) -> list[Any]:
        """Every tool the server lists (all pages), as the SDK's Tool models; MCPUnavailable
        if the server cannot be started or reached."""
        try:
            return self.run(self._list(), LIST_SECONDS)
        except MCPUnavailable:
            raise
        except TimeoutError:
            raise MCPUnavailable(
                f"the MCP server {self.server.label} listed no tools within {LIST_SECONDS:g}s"
            ) from None
        except Exception as exc:
            raise MCPUnavailable(
                f"the MCP server {self.server.label} could not be reached: {cause(exc)}"
            ) from None

    async def call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> CallToolResult:
        """Call tool `name` from any event loop: cancelling this cancels the call."""
        loop = self._own_loop()
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._call(name, arguments, meta), loop)
        )

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Run `coroutine` on the session's loop and wait for it (from another thread)."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._own_loop())
        return future.result(timeout)

    def close(self) -> None:
        """Close the session, if open, waiting a little for the server to be let go."""
        with self._lock:
            loop = self._loop if self._pid == os.getpid() else None
        if loop is None or loop.is_closed():
            return
        # At exit, a server that will not go is left to the OS.
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(wait=True), loop).result(CLOSE_SECONDS)

    # -- on the session's loop ------------------------------------------------------------

    async def _list(self) -> list[Any]:
        client = await self._open()
        tools: list[Any] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return tools
        except BaseException:
            await self._close()
            raise

    async def _call(self, name: str, arguments: dict[str, Any], meta: dict[str, Any]) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = await self._open()
        try:
            return await client.call_tool(name, arguments, meta=cast("RequestParamsMeta", meta))
        except asyncio.CancelledError:
            raise  # a call given up (time limit, cancel): the session itself is sound
        except MCPError as exc:
            if exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                # The server refused the request (unknown tool, bad arguments): an answer,
                # over a sound session, that the model reads as the call's error.
                raise MCPToolError(str(exc)) from None
            await self._close()
            raise MCPUnavailable(
                f"the MCP server {self.server.label} failed during the call: {cause(exc)}"
            ) from None
        except Exception as exc:
            # No result at all: the server crashed or the connection dropped. The next call
            # opens a new session (and starts a stdio server again).
            await self._close()
            raise MCPUnavailable(
                f"the MCP server {self.server.label} failed during the call: {cause(exc)}"
            ) from None

    async def _open(self) -> Client:
        try:
            return await self._opened()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise MCPUnavailable(
                f"the MCP server {self.server.label} could not be reached: {cause(exc)}"
            ) from None

    async def _opened(self) -> Client:
        if self._session is None or (
            self._session.done() and self._session.exception() is not None
        ):
            self._session = asyncio.get_running_loop().create_future()
            self._closing = asyncio.Event()
            self._holder = asyncio.get_running_loop().create_task(
                self._hold(self._session, self._closing)
            )
        return await asyncio.shield(self._session)

    async def _hold(self, opened: asyncio.Future[Client], closing: asyncio.Event) -> None:
        """Open the session, hand it over, keep it until closed (one task enters and leaves)."""
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client(stack))
                opened.set_result(client)
                await closing.wait()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc)
        finally:
            if self._session is opened:
                self._session = None

    async def _client(self, stack: AsyncExitStack) -> Client:
        from mcp import Client, StdioServerParameters

        if self.server.command is not None:
            command = self.server.command
            parameters = StdioServerParameters(
                command=command[0],
                args=list(command[1:]),
                env=None if self.server.env is None else dict(self.server.env),
            )
            return Client(parameters, cache=None)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert self.server.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(self.server.headers or {}),
                timeout=httpx2.Timeout(30.0, read=300.0),
            )
        )
        return Client(streamable_http_client(self.server.url, http_client=http), cache=None)

    async def _close(self, *, wait: bool = False) -> None:
        """Let the session go; with `wait`, until it has (a stdio server ended, so it
        writes nothing to a pipe this process no longer reads)."""
        session, closing, holder = self._session, self._closing, self._holder
        self._session = None
        if closing is not None:
            closing.set()
        if session is not None and not session.done():
            session.cancel()
        if wait and holder is not None:
            await asyncio.wait([holder], timeout=CLOSE_SECONDS)

    # -- the loop -------------------------------------------------------------------------

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        """This process's loop for the session: a forked child starts its own (the
        parent's thread, and its session, are not in the child)."""
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="runner-mcp", daemon=True)
                thread.start()
                self._loop, self._pid = loop, os.getpid()
                self._session = self._closing = None
            return self._loop


def cause(exc: BaseException) -> str:
    """What went wrong, in words: the first error inside the SDK's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# Every connection of this process, closed at exit (a weak set: tools no one holds any more
# take theirs with them).
_SESSIONS: weakref.WeakSet[Connection] = weakref.WeakSet()


def close_sessions() -> None:
    """Close every MCP session this process opened (stdio servers end): at exit, or sooner
    by hand. A tool called after it opens its session again."""
    for connection in list(_SESSIONS):
        connection.close()


atexit.register(close_sessions)
