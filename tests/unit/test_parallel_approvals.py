"""A call that needs a person's answer is asked of alone: in a step of several calls it is
never run unasked, the model is told to call it on its own, and its neighbours run."""

from __future__ import annotations

from typing import Any

from runner import run_agent, tool

Transcript = list[dict[str, Any]]


def test_a_call_needing_approval_in_a_batch_is_not_run() -> None:
    refunded: list[float] = []
    looked_up: list[str] = []

    @tool(approval=True)
    def refund(amount: float) -> str:
        refunded.append(amount)
        return "refunded"

    def lookup(order: str) -> str:
        looked_up.append(order)
        return f"order {order}"

    def model(transcript: Transcript) -> dict[str, Any]:
        if len(transcript) == 1:
            return {
                "type": "tool",
                "calls": [
                    {"id": "c1", "name": "lookup", "args": {"order": "1042"}},
                    {"id": "c2", "name": "refund", "args": {"amount": 249.0}},
                ],
            }
        return {"type": "final", "content": "done"}

    r = run_agent(model, {"refund": refund, "lookup": lookup}, "t")
    assert (r.stop_reason, r.output) == ("final", "done")
    assert refunded == [] and looked_up == ["1042"]
    results = {m["id"]: m for m in r.transcript if m["role"] == "tool"}
    assert results["c1"]["is_error"] is False
    assert results["c2"]["is_error"] is True
    assert results["c2"]["content"].startswith("NeedsAnswer: refund")
