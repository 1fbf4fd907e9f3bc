"""Tools: the decorator and its metadata, idempotency keys, `current_call()`, async calls."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from runner import NOT_APPLIED, Tool, ToolCall, current_call, run_agent, tool

Transcript = list[dict[str, Any]]


def calls_then_answers(name: str, args: dict[str, Any] | None = None, times: int = 1) -> Any:
    """A model that calls `name` `times` times (fresh args each), then answers."""

    def model(tr: Transcript) -> dict[str, Any]:
        done = sum(1 for m in tr if m["role"] == "tool")
        if done < times:
            given = dict(args) if args is not None else {"n": done}
            return {"type": "tool", "name": name, "args": given}
        return {"type": "final", "content": tr[-1]["content"]}

    return model


# -- the decorator --------------------------------------------------------------------------


def test_bare_decorator_makes_a_tool_with_defaults() -> None:
    @tool
    def add(a: int, b: int) -> int:
        return a + b

    assert isinstance(add, Tool)
    assert add(2, 3) == 5
    assert add(a=2, b=3) == 5
    assert (add.idempotent, add.timeout, add.reconcile) == (False, None, None)
    assert add.takes_key is False
    assert add.retry_safe is False


def test_decorator_with_arguments() -> None:
    def check(key: str, args: dict[str, Any]) -> Any:
        return NOT_APPLIED

    @tool(idempotent=True, timeout=5, reconcile=check)
    def send(to: str) -> str:
        return f"sent to {to}"

    assert isinstance(send, Tool)
    assert send.idempotent is True
    assert send.timeout == 5
    assert send.reconcile is check
    assert send.retry_safe is True
    assert send(to="bob") == "sent to bob"


def test_decorator_with_empty_arguments() -> None:
    @tool()
    def ping() -> str:
        return "pong"

    assert isinstance(ping, Tool)
    assert ping() == "pong"


def test_tool_keeps_the_function() -> None:
    def f(x: int) -> int:
        return x

    assert tool(f).fn is f


def test_a_tool_taking_an_idempotency_key_is_retry_safe() -> None:
    @tool
    def charge(amount: int, idempotency_key: str) -> str:
        return "ok"

    assert charge.takes_key is True
    assert charge.retry_safe is True
    assert charge.idempotent is False


def test_takes_key_on_callables_without_a_signature() -> None:
    assert Tool(print).takes_key is False  # a builtin: may have no signature
    assert Tool(dict).takes_key is False


def test_a_tools_signature_is_read_once_however_many_runs_ask() -> None:
    reads: list[int] = []

    class Charge:
        @property
        def __signature__(self) -> inspect.Signature:
            reads.append(1)
            key = inspect.Parameter("idempotency_key", inspect.Parameter.KEYWORD_ONLY)
            return inspect.Signature([key])

        def __call__(self, *, idempotency_key: str) -> str:
            return idempotency_key

    charge = Tool(Charge())
    assert charge.takes_key and charge.takes_key and charge.retry_safe
    assert len(reads) == 1
    # What it read is no part of the tool's identity: equal to, and hashed as, a tool of
    # the same function that has not read it yet.
    fresh = Tool(charge.fn)
    assert charge == fresh and hash(charge) == hash(fresh)


@pytest.mark.parametrize("timeout", [0, -1, True, "5", float("nan")])
def test_a_bad_tool_timeout_is_refused_at_declaration(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout"):
        tool(timeout=timeout)(lambda: None)


def test_tools_can_be_plain_callables_or_tools_in_one_run() -> None:
    @tool
    def decorated(n: int) -> str:
        return "decorated"

    def model(tr: Transcript) -> dict[str, Any]:
        done = sum(1 for m in tr if m["role"] == "tool")
        if done == 0:
            return {"type": "tool", "name": "a", "args": {"n": 1}}
        if done == 1:
            return {"type": "tool", "name": "b", "args": {"n": 1}}
        return {"type": "final", "content": [m["content"] for m in tr if m["role"] == "tool"]}

    r = run_agent(model, {"a": decorated, "b": lambda n: "plain"}, "t")
    assert r.output == ["decorated", "plain"]


def test_not_applied_has_a_readable_repr() -> None:
    assert repr(NOT_APPLIED) == "NOT_APPLIED"


# -- idempotency keys -----------------------------------------------------------------------


def test_a_tool_with_an_idempotency_key_parameter_receives_run_id_and_step() -> None:
    keys: list[str] = []

    def charge(n: int, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return "charged"

    r = run_agent(calls_then_answers("charge", times=2), {"charge": charge}, "t")
    assert r.stop_reason == "final"
    assert r.run_id
    assert keys == [f"{r.run_id}-1", f"{r.run_id}-2"]
    # The key is the runner's business: the transcript shows only what the model sent.
    assert r.transcript[1] == {"role": "assistant", "tool": "charge", "args": {"n": 0}}


def test_keys_differ_between_runs() -> None:
    keys: list[str] = []

    def charge(n: int, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return "charged"

    run_agent(calls_then_answers("charge"), {"charge": charge}, "t")
    run_agent(calls_then_answers("charge"), {"charge": charge}, "t")
    assert len(set(keys)) == 2


def test_a_decorated_tool_with_a_key_parameter_receives_it_too() -> None:
    keys: list[str] = []

    @tool(idempotent=True)
    def charge(n: int, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return "charged"

    r = run_agent(calls_then_answers("charge"), {"charge": charge}, "t")
    assert keys == [f"{r.run_id}-1"]


def test_a_model_supplied_idempotency_key_is_refused() -> None:
    ran: list[str] = []

    def charge(n: int, idempotency_key: str) -> str:
        ran.append(idempotency_key)
        return "charged"

    model = calls_then_answers("charge", {"n": 1, "idempotency_key": "forged"})
    r = run_agent(model, {"charge": charge}, "t")
    observation = r.transcript[2]
    assert observation["role"] == "tool"
    assert observation["is_error"] is True
    assert observation["content"].startswith("ValueError: ")
    assert "idempotency_key" in observation["content"]
    assert ran == []


def test_a_refused_key_counts_toward_the_error_streak() -> None:
    def charge(n: int, idempotency_key: str) -> str:
        return "charged"

    def model(tr: Transcript) -> dict[str, Any]:
        return {"type": "tool", "name": "charge", "args": {"n": len(tr), "idempotency_key": "x"}}

    r = run_agent(model, {"charge": charge}, "t")
    assert (r.stop_reason, r.steps) == ("tool_errors", 3)


def test_a_tool_without_a_key_parameter_gets_no_key() -> None:
    seen: list[dict[str, Any]] = []

    def plain(**kwargs: Any) -> str:
        seen.append(kwargs)
        return "ok"

    run_agent(calls_then_answers("plain", {"n": 1}), {"plain": plain}, "t")
    assert seen == [{"n": 1}]


# -- current_call() -------------------------------------------------------------------------


def test_current_call_is_none_outside_a_tool() -> None:
    assert current_call() is None
    run_agent(calls_then_answers("f"), {"f": lambda n: "ok"}, "t")
    assert current_call() is None


def test_current_call_inside_a_tool() -> None:
    seen: list[ToolCall | None] = []

    def f(n: int) -> str:
        seen.append(current_call())
        return "ok"

    r = run_agent(calls_then_answers("f", times=2), {"f": f}, "t")
    assert seen == [
        ToolCall(r.run_id or "", 1, 1, f"{r.run_id}-1"),
        ToolCall(r.run_id or "", 2, 1, f"{r.run_id}-2"),
    ]


def test_current_call_is_none_inside_the_model() -> None:
    seen: list[ToolCall | None] = []

    def model(tr: Transcript) -> dict[str, Any]:
        seen.append(current_call())
        return calls_then_answers("f")(tr)

    run_agent(model, {"f": lambda n: "ok"}, "t")
    assert seen == [None, None]


def test_current_call_is_reset_after_a_tool_raises() -> None:
    def bad(n: int) -> str:
        assert current_call() is not None
        raise RuntimeError("x")

    run_agent(calls_then_answers("bad"), {"bad": bad}, "t")
    assert current_call() is None


def test_current_call_in_a_tool_with_a_timeout() -> None:
    seen: list[ToolCall | None] = []

    @tool(timeout=5)
    def f(n: int) -> str:
        seen.append(current_call())
        return "ok"

    r = run_agent(calls_then_answers("f"), {"f": f}, "t")
    assert seen == [ToolCall(r.run_id or "", 1, 1, f"{r.run_id}-1")]


def test_current_call_in_an_async_tool() -> None:
    seen: list[ToolCall | None] = []

    async def f(n: int) -> str:
        await asyncio.sleep(0)
        seen.append(current_call())
        return "ok"

    r = run_agent(calls_then_answers("f"), {"f": f}, "t")
    assert seen == [ToolCall(r.run_id or "", 1, 1, f"{r.run_id}-1")]


def test_the_tool_call_context_matches_the_key_passed() -> None:
    pairs: list[tuple[str, str | None]] = []

    def charge(n: int, idempotency_key: str) -> str:
        call = current_call()
        pairs.append((idempotency_key, call.idempotency_key if call else None))
        return "ok"

    run_agent(calls_then_answers("charge"), {"charge": charge}, "t")
    assert len(pairs) == 1 and pairs[0][0] == pairs[0][1]


# -- async ----------------------------------------------------------------------------------


async def async_model(tr: Transcript) -> dict[str, Any]:
    await asyncio.sleep(0)
    if len(tr) == 1:
        return {"type": "tool", "name": "add", "args": {"a": 2, "b": 3}, "usage": 1}
    return {"type": "final", "content": tr[-1]["content"], "usage": 1}


async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def test_async_model_and_async_tool() -> None:
    r = run_agent(async_model, {"add": async_add}, "2+3?")
    assert (r.stop_reason, r.output, r.steps, r.tokens) == ("final", "5", 2, 2)


def test_async_tool_declared_with_the_decorator() -> None:
    r = run_agent(async_model, {"add": tool(timeout=5)(async_add)}, "2+3?")
    assert r.output == "5"


def test_async_model_with_a_deadline() -> None:
    r = run_agent(async_model, {"add": async_add}, "2+3?", max_seconds=30)
    assert r.output == "5"


def test_an_async_callable_object_is_awaited() -> None:
    class Model:
        async def __call__(self, tr: Transcript) -> dict[str, Any]:
            return await async_model(tr)

    r = run_agent(Model(), {"add": async_add}, "2+3?")
    assert r.output == "5"


def test_a_sync_callable_returning_an_awaitable_is_awaited() -> None:
    r = run_agent(lambda tr: async_model(tr), {"add": lambda a, b: async_add(a, b)}, "2+3?")
    assert r.output == "5"


def test_an_async_tool_exception_is_an_error_observation() -> None:
    async def bad(n: int) -> str:
        raise LookupError("not here")

    r = run_agent(calls_then_answers("bad"), {"bad": bad}, "t")
    assert r.transcript[2]["content"] == "LookupError: not here"
    assert r.transcript[2]["is_error"] is True


def test_an_async_model_that_raises_is_retried() -> None:
    calls = 0

    async def flaky(tr: Transcript) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("reset")
        return {"type": "final", "content": "ok"}

    r = run_agent(flaky, {}, "t", retry_backoff=0)
    assert (r.stop_reason, r.output, calls) == ("final", "ok", 2)


def test_async_tool_timeout() -> None:
    finished = threading.Event()

    @tool(timeout=0.05)
    async def slow(n: int) -> str:
        await asyncio.sleep(5)
        finished.set()
        return "late"

    r = run_agent(calls_then_answers("slow"), {"slow": slow}, "t")
    assert r.transcript[2] == {
        "role": "tool",
        "name": "slow",
        "content": "TimeoutError: slow took longer than 0.05s",
        "is_error": True,
    }
    assert not finished.is_set()


def test_async_tool_timeout_from_the_run() -> None:
    async def slow(n: int) -> str:
        await asyncio.sleep(5)
        return "late"

    r = run_agent(calls_then_answers("slow"), {"slow": slow}, "t", tool_timeout=0.05)
    assert r.transcript[2]["content"] == "TimeoutError: slow took longer than 0.05s"


def test_run_agent_works_when_called_inside_a_running_event_loop() -> None:
    async def main() -> Any:
        # A synchronous call from async code: the runner must not try to reuse this loop.
        return run_agent(async_model, {"add": async_add}, "2+3?")

    r = asyncio.run(main())
    assert (r.stop_reason, r.output) == ("final", "5")


def test_sync_model_and_tools_inside_a_running_event_loop() -> None:
    async def main() -> Any:
        return run_agent(
            calls_then_answers("add", {"a": 1, "b": 1}), {"add": lambda a, b: a + b}, "t"
        )

    r = asyncio.run(main())
    assert r.output == "2"


def test_an_event_loop_in_the_caller_survives_the_run() -> None:
    async def main() -> str:
        run_agent(async_model, {"add": async_add}, "2+3?")
        await asyncio.sleep(0)
        return "still running"

    assert asyncio.run(main()) == "still running"


def test_run_agent_inside_an_async_tool_does_not_deadlock() -> None:
    # A nested run from inside an async tool must not wait on the loop that runs the tool.
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    def inner_model(tr: Transcript) -> dict[str, Any]:
        if any(m["role"] == "tool" for m in tr):
            return {"type": "final", "content": tr[-1]["content"]}
        return {"type": "tool", "name": "double", "args": {"x": 21}}

    async def outer(task: str) -> str:
        return str(run_agent(inner_model, {"double": double}, task).output)

    def outer_model(tr: Transcript) -> dict[str, Any]:
        if any(m["role"] == "tool" for m in tr):
            return {"type": "final", "content": tr[-1]["content"]}
        return {"type": "tool", "name": "outer", "args": {"task": "inner"}}

    r = run_agent(outer_model, {"outer": outer}, "outer", tool_timeout=10)
    assert (r.stop_reason, r.output) == ("final", "42")
