"""An MCP server's tools as runner tools, over stdio and streamable HTTP, against a real
server written with the official SDK (ledger_server.py): the listing, the settlement each
annotation gives, the key in `_meta`, results and error results as observations."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from runner import Agent, run_agent
from runner.errors import MCPUnavailable
from runner.mcp import KEY_META, MCPToolError, mcp_tools
from runner.testing import ScriptedModel, call, final, tool_results
from tests.conditions import wait_until

from .conftest import ledger_lines


def test_the_servers_tools_come_with_their_schemas_and_settlement(server: dict[str, Any]) -> None:
    tools = mcp_tools(**server, prefix="shop_", approval="destructive")
    assert sorted(tools) == ["shop_charge", "shop_lookup", "shop_put", "shop_refund"]
    lookup, put, charge, refund = (
        tools[f"shop_{n}"] for n in ("lookup", "put", "charge", "refund")
    )
    assert lookup.schema is not None and lookup.schema["required"] == ["item"]
    assert lookup.fn.__doc__ == "Look an item's price up."
    # Read-only and idempotent: run again with the same key after a crash; destructive and
    # unannotated: never (OutcomeUnknown), and they are the ones approval="destructive" asks.
    assert (lookup.idempotent, put.idempotent, charge.idempotent, refund.idempotent) == (
        True, True, False, False,
    )  # fmt: skip
    assert (lookup.approval, put.approval, charge.approval, refund.approval) == (
        False, False, True, True,
    )  # fmt: skip
    assert charge.listing["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
    assert charge.listing["name"] == "charge"


def test_a_user_overrides_the_settlement_per_tool(server: dict[str, Any]) -> None:
    tools = mcp_tools(**server, idempotent={"charge": True, "lookup": False}, approval=["put"])
    assert tools["charge"].idempotent and not tools["lookup"].idempotent
    assert [name for name, tool in tools.items() if tool.approval] == ["put"]
    with pytest.raises(ValueError, match="has no tool nope"):
        mcp_tools(**server, idempotent={"nope": True})


def test_a_call_carries_its_key_and_its_result_is_the_observation(
    server: dict[str, Any], ledger: Path
) -> None:
    tools = mcp_tools(**server)
    model = ScriptedModel(
        [call("lookup", item="tea"), lambda t: final(tool_results(t)[-1]["content"])]
    )
    result = run_agent(model, tools, "price of tea?")
    assert (result.stop_reason, result.output) == ("final", "tea costs 5")
    (line,) = ledger_lines(ledger)
    assert line["tool"] == "lookup" and line["args"] == {"item": "tea"}
    assert line["key"] == f"{result.run_id}-1" and line["attempt"] == 1
    assert KEY_META == "runner/idempotency-key"


def test_an_error_result_is_an_error_observation_and_the_run_goes_on(
    server: dict[str, Any],
) -> None:
    model = ScriptedModel(
        [call("refund", amount=500), call("refund", amount=50), lambda t: final("done")]
    )
    result = run_agent(model, mcp_tools(**server), "refund")
    first, second = tool_results(result.transcript)
    assert first["is_error"]
    assert first["content"] == (
        "MCPToolError: Error executing tool refund: refund of 500 is over the limit of 100"
    )
    assert (second["is_error"], second["content"]) == (False, "refunded 50")
    assert issubclass(MCPToolError, Exception)


def test_mcp_tools_sit_beside_plain_ones_in_an_agent(server: dict[str, Any]) -> None:
    def double(n: int) -> int:
        """Double n."""
        return 2 * n

    agent = Agent(ScriptedModel(["ok"]), {**mcp_tools(**server, prefix="mcp_"), "double": double})
    assert sorted(agent.tools) == ["double", "mcp_charge", "mcp_lookup", "mcp_put", "mcp_refund"]


def test_a_bad_server_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="command"):
        mcp_tools()
    with pytest.raises(ValueError, match="url"):
        mcp_tools(url="ftp://example")
    missing = str(tmp_path / "no-such-server")
    with pytest.raises(MCPUnavailable, match=f"the MCP server {missing} could not be reached: "
                       "FileNotFoundError"):  # fmt: skip
        mcp_tools([missing])


def test_a_call_past_its_time_limit_is_given_up_and_the_session_goes_on(
    server: dict[str, Any], ledger: Path
) -> None:
    Path(f"{ledger}.hold-lookup").touch()  # held until the release file exists: never
    tools = mcp_tools(**server, timeout=0.5)
    model = ScriptedModel(
        [call("lookup", item="tea"), call("put", item="tea", price=6), lambda t: final("done")]
    )
    result = run_agent(model, tools, "prices")
    held, after = tool_results(result.transcript)
    assert (held["is_error"], held["content"]) == (
        True,
        "TimeoutError: lookup took longer than 0.5s",
    )
    assert (after["is_error"], after["content"]) == (False, "tea now costs 6")
    lines = ledger_lines(ledger)
    assert [line["tool"] for line in lines] == ["lookup", "put"]
    if "command" in server:  # one server process served both: the session was kept
        assert lines[0]["pid"] == lines[1]["pid"]


def test_destructive_tools_can_wait_for_a_persons_approval(
    server: dict[str, Any], ledger: Path, db_url: str
) -> None:
    from runner import Runner

    tools = mcp_tools(**server, approval="destructive")
    agent = Agent(
        ScriptedModel([call("charge", amount=5), lambda t: final(tool_results(t)[-1]["content"])]),
        tools,
    )
    with Runner(db_url) as runner:
        waiting = runner.run(agent, "charge 5", id="approve-me")
        assert waiting.status == "waiting"
        assert ledger_lines(ledger) == []  # not called before a person says so
        runner.approve("approve-me", by="test")
        done = runner.resume("approve-me", agent=agent)
    assert (done.stop_reason, done.output) == ("final", "charged 5")
    assert [(line["tool"], line["key"]) for line in ledger_lines(ledger)] == [
        ("charge", "approve-me-1")
    ]


def test_a_cancel_reaches_an_mcp_call_in_flight(server: dict[str, Any], ledger: Path) -> None:
    Path(f"{ledger}.hold-charge").touch()  # the call would wait for ever
    cancel = threading.Event()

    def cancel_once_called() -> None:
        wait_until(lambda: len(ledger_lines(ledger)) == 1, what="the call to reach the server")
        cancel.set()

    threading.Thread(target=cancel_once_called, daemon=True).start()
    model = ScriptedModel([call("charge", amount=5), lambda t: final("unreached")])
    result = run_agent(model, mcp_tools(**server), "charge", cancel=cancel)
    assert result.stop_reason == "cancelled"
    (observation,) = tool_results(result.transcript)
    assert observation["is_error"]
    assert observation["content"].startswith("Cancelled: the run was cancelled while charge ran")
