"""Calling user code (models, tools): sync or async, with or without a time limit, one at a
time or several at once.

Python cannot kill a thread, so a timed-out sync call is abandoned on a daemon thread and
keeps running in the background; the loop moves on. An async call that times out is
cancelled. Coroutines run on one background event loop, so the loop works the same when its
caller is itself inside an event loop; several async calls made at once run there as tasks
side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import math
import os
import queue
import select
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future, wait
from typing import Any

from runner.core import watching
from runner.core.interrupts import CallInterrupted
from runner.core.watching import WATCH_EVERY, Watch


class CallTimedOut(Exception):
    """The call did not return within its time limit."""


def invoke(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: float | None,
    *,
    watch: Watch | None = None,
) -> Any:
    """Call `fn(*args, **kwargs)`, await it if async, give up after `timeout` seconds.

    With `watch`, the call is also given up (CallInterrupted) as soon as `watch()` names a
    reason, so a cancel or a graceful stop reaches a call that would never return."""
    if timeout is not None and timeout >= threading.TIMEOUT_MAX:
        # Longer than a lock can wait (an infinite budget, or a far deadline) would raise
        # OverflowError in the wait: it is no limit at all in practice.
        timeout = None
    if is_async(fn):
        return _await(fn(*args, **kwargs), timeout, watch)
    if timeout is None and watch is None:
        result = fn(*args, **kwargs)
        if type(result) in PLAIN:  # what models and tools return: never awaitable
            return result
        return _await(result, None) if inspect.isawaitable(result) else result
    return _in_thread(fn, args, kwargs, timeout, watch)


# Results that cannot be awaitable: checked by exact type first, since inspect.isawaitable
# asks the Awaitable ABC, which costs more than the rest of a call's bookkeeping.
PLAIN = frozenset({str, dict, list, int, float, bool, type(None)})


def awaited(result: Any, timeout: float | None, watch: Watch | None) -> Any:
    """What a sync call's `result` stands for: itself, or, if awaitable, what it gives when
    awaited within `timeout` seconds (CallTimedOut past it)."""
    if inspect.isawaitable(result):
        return _await(result, timeout, watch)
    return result


class SpareCall:
    """`fn()` started on a spare thread when made: `wake` is set when it ends (and may
    be set for other reasons: look at `ended`), `outcome()` is its value or raises its
    exception."""

    __slots__ = ("_call",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._call = _ThreadCall(fn, (), {})
        _SPARE.run(self._call)

    @property
    def wake(self) -> _Signal | _LockSignal:
        return self._call.wake

    @property
    def ended(self) -> bool:
        return self._call.ended

    def outcome(self) -> Any:
        if self._call.error is not None:
            raise self._call.error
        return self._call.value


class Together:
    """Threads for running several calls at once, at most `limit` at a time.

    One per run: the calling thread takes its share of the calls, and the helper threads
    (`limit - 1` at most) are made when a step first needs them and kept for the next steps:
    making a thread, or handing a call to one, costs about as much as a commit.

    Ctrl-C (KeyboardInterrupt, which Python raises on the main thread only) gives up at
    once: Python cannot stop a thread, so the calls in flight on the helpers are left to
    run to their end on their own. The helpers are daemon threads, so they never hold
    the process open at exit; `abandoned` is set, for the callers' bookkeeping to drop
    what those calls return (a resume settles them, as any call interrupted in flight).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._helpers: _Helpers | None = None
        self.abandoned = threading.Event()

    def run(self, jobs: Sequence[Callable[[], None]]) -> None:
        """Run `jobs` (in order on this thread if the limit is 1, or there is one job).

        Each job runs in a copy of this thread's context, so a tool sees the context
        variables the loop's thread would have shown it. Every started job is waited for,
        so nothing keeps running unseen; once one job raised, the jobs not started yet are
        skipped, and the first exception (in job order) is raised here. KeyboardInterrupt
        is raised at once: see the class.
        """
        if self.limit <= 1 or len(jobs) <= 1:
            for job in jobs:
                job()
            return
        if self._helpers is None:
            self._helpers = _Helpers(self.limit - 1)
        waiting = [(n, contextvars.copy_context(), job) for n, job in enumerate(jobs)]
        waiting.reverse()  # taken from the end: in job order
        failures: dict[int, BaseException] = {}
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    if failures or not waiting or self.abandoned.is_set():
                        return  # after a failure (a lost lease, say): start no more effects
                    n, context, job = waiting.pop()
                try:
                    context.run(job)
                except KeyboardInterrupt:
                    raise  # only ever on the calling thread: handled below
                except BaseException as exc:  # raised below, once every started job ended
                    with lock:
                        failures[n] = exc

        helpers = [self._helpers.submit(work) for _ in range(min(self.limit, len(jobs)) - 1)]
        try:
            work()
            wait(helpers)
        except KeyboardInterrupt:
            self.abandoned.set()  # no job starts from now on; those running are left be
            raise
        if failures:
            raise failures[min(failures)]

    def close(self) -> None:
        if self._helpers is not None:
            self._helpers.close()  # each helper exits once its job (if any) has ended
            self._helpers = None


class _Helpers:
    """Daemon threads taking work from a queue: unlike a ThreadPoolExecutor's, they never
    keep the process from exiting (the interpreter joins those at exit, which made a
    Ctrl-C wait for every call still in flight)."""

    def __init__(self, count: int) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._count = count
        self._threads: list[threading.Thread] = []

    def submit(self, work: Callable[[], None]) -> Future[None]:
        future: Future[None] = Future()
        if len(self._threads) < self._count:
            thread = threading.Thread(target=self._serve, name="runner-tool", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._queue.put((work, future))
        return future

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, future = item
            try:
                work()
                future.set_result(None)
            except BaseException as exc:  # handed to the waiting caller, never lost
                future.set_exception(exc)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        self._threads = []


# Whether a callable is async, remembered: inspecting it costs more than the rest of an
# in-memory step, and a run calls the same model and tools over and over.
_async: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def is_async(fn: Callable[..., Any]) -> bool:
    try:
        return _async[fn]
    except (KeyError, TypeError):  # TypeError: an object that takes no weak reference
        pass
    inner = getattr(fn, "fn", fn)  # a runner Tool wraps the user's callable
    found = inspect.iscoroutinefunction(inner) or inspect.iscoroutinefunction(
        getattr(inner, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    )
    with contextlib.suppress(TypeError):
        _async[fn] = found
    return found


def _in_thread(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: float | None,
    watch: Watch | None,
) -> Any:
    call = _ThreadCall(fn, args, kwargs)
    _SPARE.run(call)
    return call.result(timeout, watch)


class _Signal:
    """Wakes one waiting thread: an eventfd, written and waited on with the GIL released.

    Handing a call to another thread and back is two wake-ups. Woken through a lock, a
    thread wakes while the waker still holds the GIL, so it sleeps again on the GIL and is
    woken a second time: six context switches a model call instead of two, which on a
    virtual machine cost more than the rest of a step's Python (docs/performance/step.md). An
    eventfd is written with the GIL already let go, so the woken thread takes it at once.

    `set` may come more than once before a `wait` (a call abandoned at its timeout ends
    later and still says so): a waiter checks what it waits for after each wake-up."""

    __slots__ = ("__weakref__", "_fd", "_poll")

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_CLOEXEC)
        _EVENTFDS.add(self._fd)
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        # Closed once nothing can set it any more: a call abandoned on a spare thread keeps
        # its caller's signal alive, so its late `set` never writes to a reused descriptor.
        # Not at exit, while daemon threads still run: a call ending then would write to
        # whatever file took the number, and an idle spare thread's wait would raise.
        weakref.finalize(self, _close, self._fd).atexit = False

    def set(self) -> None:
        os.eventfd_write(self._fd, 1)

    def wait(self, timeout: float | None) -> bool:
        """Wait until set (True, and clear it) or for `timeout` seconds (False), at most
        about 24 days at a time (poll's limit): a longer wait returns early, and its caller
        looks again, as after any wake-up."""
        ms = None if timeout is None else min(math.ceil(max(timeout, 0.0) * 1000), _MOST_POLL_MS)
        if not self._poll.poll(ms):
            return False
        os.eventfd_read(self._fd)
        return True


# poll's timeout is a C int of milliseconds.
_MOST_POLL_MS = 2**31 - 1


class _LockSignal:
    """`_Signal` where there is no eventfd (not Linux): a bare lock, made for one call alone
    (a caller's) or kept by a spare thread. A spare thread may be handed its next call
    before it waits again, and then run it without waiting: the wake-up is still pending
    when the call after that is handed over, so a set while set is one wake-up, as an
    eventfd's count is."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        with contextlib.suppress(RuntimeError):  # already set: the wake-up is pending
            self._lock.release()

    def wait(self, timeout: float | None) -> bool:
        return self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))


_EVENTFD = hasattr(os, "eventfd") and hasattr(select, "poll")
# The eventfds open (a set: its add and discard need no lock, so a finalizer may run
# anywhere). At most a quarter of the process's descriptors go to them: a worker of a
# thousand runs has two threads a run in a model call, and its sockets and files come
# first; past that, threads signal each other through locks, as they did before.
_EVENTFDS: set[int] = set()
_MOST_EVENTFDS = 0
if _EVENTFD:
    import resource

    _MOST_EVENTFDS = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4
# Each calling thread waits for its calls on a signal of its own, made at its first call.
_callers = threading.local()


def _close(fd: int) -> None:
    _EVENTFDS.discard(fd)
    os.close(fd)


def _signal() -> _Signal | _LockSignal:
    if _EVENTFD and len(_EVENTFDS) < _MOST_EVENTFDS:
        with contextlib.suppress(OSError):  # out of descriptors after all: a lock will do
            return _Signal()
    return _LockSignal()


def _callers_signal() -> _Signal | _LockSignal:
    signal: _Signal | _LockSignal | None = getattr(_callers, "signal", None)
    if signal is None:
        signal = _signal()
        if isinstance(signal, _LockSignal):
            return signal  # set once: one per call
        _callers.signal = signal
    return signal


class _ThreadCall:
    """One sync call on a spare thread; its caller waits on its own signal (`_Signal`)."""

    __slots__ = ("args", "context", "ended", "error", "fn", "kwargs", "value", "wake")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.context = contextvars.copy_context()
        self.wake = _callers_signal()
        self.ended = False
        self.value: Any = None
        self.error: BaseException | None = None

    def target(self) -> None:
        """Run the call (on the spare thread); `finish` then tells its caller."""
        try:
            result = self.context.run(self.fn, *self.args, **self.kwargs)
            if type(result) not in PLAIN and inspect.isawaitable(result):
                result = _await(result, None)
            self.value = result
        except BaseException as exc:  # handed to the waiting caller, never lost
            self.error = exc

    def finish(self) -> None:
        self.ended = True  # before the wake-up: the caller checks it after each one
        self.wake.set()

    def result(self, timeout: float | None, watch: Watch | None) -> Any:
        def ended(left: float | None) -> bool:
            self.wake.wait(left)  # a wake-up may be an abandoned call's, late: look again
            return self.ended

        if watch is None:
            _wait_for(ended, timeout, None)
        else:
            # Asked by the one watcher thread, which wakes this caller only for a reason.
            key = watching.watcher().add(watch, self.wake)
            try:
                _wait_for(ended, timeout, watch, every=None)
            finally:
                watching.watcher().remove(key)
        if self.error is not None:
            raise self.error
        return self.value


class _Spare:
    """A spare thread's job slot and the signal it waits on."""

    __slots__ = ("call", "wake")

    def __init__(self, call: _ThreadCall) -> None:
        self.call: _ThreadCall | None = call
        self.wake = _signal()


class _SpareThreads:
    """Daemon threads for timed calls, kept between calls: handing a call to a waiting
    thread costs a fraction of starting one, and every model call of a run is timed.

    Each call gets a thread of its own (an idle one, the last to idle first, or a new one),
    so a call abandoned after its timeout, still running, never holds up the next. A thread
    idle for IDLE_SECONDS ends, so a burst of calls leaves nothing behind."""

    IDLE_SECONDS = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Spare] = []

    def run(self, call: _ThreadCall) -> None:
        with self._lock:
            spare = self._idle.pop() if self._idle else None
        if spare is None:
            spare = _Spare(call)
            threading.Thread(
                target=self._serve, args=(spare,), name="runner-call", daemon=True
            ).start()
            return
        spare.call = call  # that thread is this call's alone: it left the idle list
        spare.wake.set()

    def _serve(self, spare: _Spare) -> None:
        while True:
            call = spare.call
            if call is None:
                if spare.wake.wait(self.IDLE_SECONDS):
                    continue  # a call was handed over
                with self._lock:
                    # Leave only if no call was handed over meanwhile (then it is set).
                    if spare in self._idle:
                        self._idle.remove(spare)
                        return
                continue
            spare.call = None
            call.target()
            # Idle before the caller is told: its next call finds this thread waiting,
            # and the thread is already on its way to sleep when the caller wakes.
            with self._lock:
                self._idle.append(spare)
            call.finish()
            del call


_SPARE = _SpareThreads()


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _after_fork() -> None:
    """A forked child has none of its parent's threads: start over with no spare thread
    idle and no background loop (the parent's, never run in the child, would take an async
    call and never run it)."""
    global _SPARE, _callers, _loop, _loop_lock
    watching.after_fork()
    _SPARE = _SpareThreads()
    _callers = threading.local()
    _loop = None
    _loop_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def on_shared_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether `loop` is the one `invoke` awaits coroutines on (a framework's loop that runs
    there can have a coroutine of its own awaited by `invoke` with no thread between)."""
    return loop is _loop


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="runner-async", daemon=True).start()
            _loop = loop
        return _loop


def _await(awaitable: Any, timeout: float | None, watch: Watch | None = None) -> Any:
    context = contextvars.copy_context()

    async def in_callers_context() -> Any:
        # The task runs in the loop thread's context: carry the caller's (the current tool
        # call, for one) across, so `current_call()` works inside async tools.
        for var, value in context.items():
            var.set(value)
        return await awaitable

    coroutine: Coroutine[Any, Any, Any] = in_callers_context()
    loop = _background_loop()
    private = _on_loop(loop)
    if private:
        # Called from an async model or tool (a nested run_agent): waiting here for the
        # shared loop would block the very loop that must run the call. Use a loop of its own.
        loop = asyncio.new_event_loop()
        nested = threading.Thread(target=_serve_once, args=(loop,), name="runner-async-nested")
        nested.daemon = True
        nested.start()
    try:
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        return _result(future, timeout, cancel=True, watch=watch)
    finally:
        if private:
            loop.call_soon_threadsafe(loop.stop)


def _serve_once(loop: asyncio.AbstractEventLoop) -> None:
    """Run a private loop until stopped, then close it (it serves one nested call)."""
    try:
        loop.run_forever()
    finally:
        loop.close()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _result(
    future: Future[Any], timeout: float | None, *, cancel: bool, watch: Watch | None = None
) -> Any:
    """The call's result, or CallTimedOut once `timeout` passes, or CallInterrupted once
    `watch` names a reason (cancelling an async call either way)."""
    # Waiting apart from taking the result matters: `future.result(timeout)` raises the
    # builtin TimeoutError on a timeout, the very exception a call itself raises when its
    # own socket times out, which must reach the caller as that call's error.
    try:
        _wait_for(lambda left: bool(wait([future], timeout=left)[0]), timeout, watch)
    except (CallInterrupted, CallTimedOut):
        if cancel:  # never a thread's future: its late set_result would then raise
            future.cancel()
        raise
    return future.result()


def _wait_for(
    ended: Callable[[float | None], bool],
    timeout: float | None,
    watch: Watch | None,
    every: float | None = WATCH_EVERY,
) -> None:
    """Wait until `ended(seconds)` (which waits at most that long, None: for ever) says the
    call ended; CallTimedOut once `timeout` passes, CallInterrupted once `watch` names a
    reason (asked every `every` seconds, and after each wake-up: None, when the watcher
    thread asks it and wakes `ended`'s wait)."""
    ends = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    while True:
        left = None if ends is None else max(ends - time.monotonic(), 0.0)
        if watch is not None and every is not None:
            left = every if left is None else min(left, every)
        if ended(left):
            return
        why = None if watch is None else watch()
        if why is not None:
            raise CallInterrupted(why)
        if ends is not None and time.monotonic() >= ends:
            raise CallTimedOut(f"no result after {timeout:g}s")


async def watched(awaitable: Any, timeout: float | None, watch: Watch | None) -> Any:
    """Await `awaitable` on the running loop as `invoke` awaits one from a thread: given up
    (cancelled) with CallTimedOut once `timeout` passes, with CallInterrupted once `watch()`
    names a reason (asked every WATCH_EVERY seconds)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(awaitable)
    ends = None if timeout is None else loop.time() + max(timeout, 0.0)
    while True:
        left = None if ends is None else max(ends - loop.time(), 0.0)
        if watch is not None:
            left = WATCH_EVERY if left is None else min(left, WATCH_EVERY)
        try:
            done, _ = await asyncio.wait({task}, timeout=left)
        except asyncio.CancelledError:
            task.cancel()  # the caller was cancelled: so is its call
            raise
        if done:
            return task.result()
        why = None if watch is None else watch()
        if why is not None:
            task.cancel()
            raise CallInterrupted(why)
        if ends is not None and loop.time() >= ends:
            task.cancel()
            raise CallTimedOut(f"no result after {timeout:g}s")


def described(exc: BaseException | None) -> str:
    """A failed call of user code as the model and the journal are told it: `Type: message`."""
    return "unknown error" if exc is None else f"{type(exc).__name__}: {exc}"
