"""Agents for the page's tests, loaded by reference (`tests/ui/agents.py:NAME`): a model
scripted by the task's first word, and tools whose results echo what they were given."""

from __future__ import annotations

from typing import Any

from runner import Agent, tool

# Everything a page must show as text, never run: a script, an event handler, script URLs.
HOSTILE = (
    "<script>window.pwned = 'script'; document.title = 'pwned'</script>"
    "<img src=\"x\" onerror=\"window.pwned = 'img'; document.title = 'pwned'\">"
    '<a href="javascript:window.pwned=\'link\'" id="hostile-link">click me</a>'
    " [markdown](javascript:window.pwned='markdown') javascript:alert(1)"
)


@tool(idempotent=True)
def echo(text: str) -> str:
    return text


@tool(idempotent=True)
def add(a: int, b: int) -> int:
    return a + b


def broken(n: int) -> str:
    raise ValueError(f"broken tool called with {n}")


def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """`ok ...`: add, then answer. `loop ...`: keeps calling (step cap). `fail ...`: a tool
    that raises (error streak). `hostile ...`: echoes HOSTILE, then answers with it."""
    task = str(transcript[0]["content"])
    done = [m for m in transcript if m["role"] == "tool"]
    usage = {"input_tokens": 20 + 3 * len(transcript), "output_tokens": 5, "cost": 0.0001}
    word = task.split()[0]
    if word == "loop":
        return {"type": "tool", "name": "add", "args": {"a": len(done), "b": 1}, "usage": usage}
    if word == "fail":
        return {"type": "tool", "name": "broken", "args": {"n": len(done)}, "usage": usage}
    if word == "hostile":
        if not done:
            return {"type": "tool", "name": "echo", "args": {"text": HOSTILE}, "usage": usage}
        return {"type": "final", "content": "answer: " + HOSTILE, "usage": usage}
    if not done:
        return {"type": "tool", "name": "add", "args": {"a": 2, "b": 3}, "usage": usage}
    return {"type": "final", "content": f"the sum is {done[-1]['content']}", "usage": usage}


TOOLS = {"echo": echo, "add": add, "broken": broken}
BUDGETS: dict[str, Any] = {"max_steps": 4, "max_repeats": None}

shop_r1 = Agent(model, TOOLS, name="shop", release="r1", **BUDGETS)
shop_r2 = Agent(model, TOOLS, name="shop", release="r2", **BUDGETS)
long = Agent(
    model, TOOLS, name="long", release="r2", max_steps=120, max_tokens=None, max_repeats=None
)
hostile = Agent(model, TOOLS, name="<u>hostile</u>", release="<i>r1</i>", **BUDGETS)
