"""runner.core.kept_threads: a framework's sync calls on threads kept between calls."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from runner.core.kept_threads import KeptThreads, runs_in_context


def test_calls_one_after_another_share_one_daemon_thread() -> None:
    threads = KeptThreads()
    ran = [threads.submit(threading.current_thread).result() for _ in range(5)]
    assert len(set(ran)) == 1 and ran[0].daemon and ran[0] is not threading.current_thread()


def test_calls_at_once_each_get_a_thread_and_an_error_reaches_its_caller() -> None:
    threads = KeptThreads()
    both_in = threading.Barrier(2, timeout=30)
    first, second = threads.submit(both_in.wait), threads.submit(both_in.wait)
    assert {first.result(), second.result()} == {0, 1}  # neither waited for the other
    failed = threads.submit(int, "not a number")
    with pytest.raises(ValueError):
        failed.result()


def test_a_call_in_its_callers_context_is_known_by_it() -> None:
    """As Pydantic AI hands a sync function over: `run_in_executor(threads, ctx.run, fn)`."""
    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="none")
    threads = KeptThreads()

    async def main() -> str:
        seen.set("the caller's")
        context = contextvars.copy_context()
        assert runs_in_context(context.run) is context and runs_in_context(print) is None
        return await asyncio.get_running_loop().run_in_executor(threads, context.run, seen.get)

    assert asyncio.run(main()) == "the caller's"
