"""Calling user code (models, tools): sync or async, with or without a time limit.

Python cannot kill a thread, so a timed-out sync call is abandoned on a daemon thread and
keeps running in the background; the loop moves on. An async call that times out is
cancelled. Coroutines run on one background event loop, so the loop works the same when its
caller is itself inside an event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any


class CallTimedOut(Exception):
    """The call did not return within its time limit."""


def invoke(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
) -> Any:
    """Call `fn(*args, **kwargs)`, await it if async, give up after `timeout` seconds."""
    if _is_async(fn):
        return _await(fn(*args, **kwargs), timeout)
    if timeout is None:
        result = fn(*args, **kwargs)
        return _await(result, None) if inspect.isawaitable(result) else result
    return _in_thread(fn, args, kwargs, timeout)


def _is_async(fn: Callable[..., Any]) -> bool:
    inner = getattr(fn, "fn", fn)  # a runner Tool wraps the user's callable
    return inspect.iscoroutinefunction(inner) or inspect.iscoroutinefunction(
        getattr(inner, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    )


def _in_thread(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float
) -> Any:
    future: Future[Any] = Future()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            result = context.run(fn, *args, **kwargs)
            if inspect.isawaitable(result):
                result = _await(result, None)
            future.set_result(result)
        except BaseException as exc:  # handed to the waiting caller, never lost
            future.set_exception(exc)

    threading.Thread(target=target, name="runner-call", daemon=True).start()
    try:
        return future.result(timeout=max(timeout, 0.0))
    except FutureTimeout:
        raise CallTimedOut(f"no result after {timeout:g}s") from None


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="runner-async", daemon=True).start()
            _loop = loop
        return _loop


def _await(awaitable: Any, timeout: float | None) -> Any:
    context = contextvars.copy_context()

    async def in_callers_context() -> Any:
        # The task runs in the loop thread's context: carry the caller's (the current tool
        # call, for one) across, so `current_call()` works inside async tools.
        for var, value in context.items():
            var.set(value)
        return await awaitable

    coroutine: Coroutine[Any, Any, Any] = in_callers_context()
    future = asyncio.run_coroutine_threadsafe(coroutine, _background_loop())
    try:
        return future.result(timeout=None if timeout is None else max(timeout, 0.0))
    except FutureTimeout:
        future.cancel()
        raise CallTimedOut(f"no result after {timeout:g}s") from None
