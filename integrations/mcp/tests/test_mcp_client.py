"""The client side: an SDK ``Client`` on the shop server (in process), its tool calls through a Guard."""

from __future__ import annotations

from typing import Any

import pytest
from agentguard_mcp import GuardedClient
from mcp import Client

from agentguard import Outcome, ShortCircuitViolation, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer

from .conftest import make_guard
from .shop_server import make_server


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


async def test_tools_list_offers_only_the_specs_capabilities() -> None:
    guard = make_guard()
    async with Client(make_server([])) as client, guard.engagement():
        listed = await GuardedClient(client, guard).list_tools()
    names = {tool.name for tool in listed.tools}
    assert names == {"lookup_order", "send_email", "refund", "web_search", "flaky"}
    assert "delete_everything" not in names


async def test_denials_come_back_as_error_results_naming_the_rule_and_the_tool_never_runs() -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    guard = make_guard()
    async with Client(make_server(ran)) as client, guard.engagement(user=User(id="u1")) as eng:
        tools = GuardedClient(client, guard)
        sent = await tools.call_tool("send_email", {"to": "bob@corp.com", "body": "hi"})
        refused = await tools.call_tool("send_email", {"to": "eve@evil.test", "body": "hi"})
        unknown = await tools.call_tool("delete_everything", {})
        withheld = await tools.call_tool("web_search", {"query": "many"})
        found = await tools.call_tool("lookup_order", {"order_id": "A-1"})
    assert not sent.is_error
    assert _text(sent) == "sent to bob@corp.com"
    assert refused.is_error
    assert "[restriction input] send-email" in _text(refused)
    assert "The tool was not run" in _text(refused)
    assert unknown.is_error
    assert "[capability" in _text(unknown)
    assert withheld.is_error
    assert "SECRET" not in _text(withheld)  # a withheld output never reaches the model
    assert "its result was withheld" in _text(withheld)
    assert found.structured_content == {"order_id": "A-1", "status": "shipped"}
    assert [name for name, _ in ran] == ["send_email", "web_search", "lookup_order"]
    assert eng.view()["history"]["web-search"][0]["outputs"] is None


async def test_a_tool_error_passes_the_output_restriction_before_the_model_sees_it() -> None:
    guard = make_guard()
    async with Client(make_server([])) as client, guard.engagement():
        tools = GuardedClient(client, guard)
        plain = await tools.call_tool("flaky", {"message": "disk full"})
        secret = await tools.call_tool("flaky", {"message": "SECRET key 42"})
    assert plain.is_error
    assert "disk full" in _text(plain)
    assert secret.is_error
    assert "key 42" not in _text(secret)  # the error text was withheld
    assert "[restriction output] flaky" in _text(secret)


async def test_a_loop_raises_the_typed_error_and_the_engagement_stays_stopped() -> None:
    guard = make_guard()
    async with Client(make_server([])) as client:
        tools = GuardedClient(client, guard)
        with guard.engagement():
            for _ in range(2):
                await tools.call_tool("lookup_order", {"order_id": "A-1"})
            with pytest.raises(ShortCircuitViolation):
                await tools.call_tool("lookup_order", {"order_id": "A-1"})
            with pytest.raises(ShortCircuitViolation, match="engagement is stopped"):
                await tools.call_tool("send_email", {"to": "bob@corp.com", "body": "x"})


async def test_review_asks_the_guards_reviewer() -> None:
    asked: list[Any] = []

    def supervisor(request: Any) -> bool:
        asked.append(dict(request.inputs))
        return request.inputs["order_id"] != "A-2"

    guard = make_guard(reviewers={"supervisor": supervisor})
    async with Client(make_server([])) as client, guard.engagement():
        tools = GuardedClient(client, guard)
        approved = await tools.call_tool("refund", {"order_id": "A-1", "amount": 30})
        rejected = await tools.call_tool("refund", {"order_id": "A-2", "amount": 30})
    assert approved.structured_content == {"order_id": "A-1", "refunded": 30.0}
    assert rejected.is_error
    assert "[review input] refund" in _text(rejected)
    assert [a["order_id"] for a in asked] == ["A-1", "A-2"]


async def test_protocols_mcp_steps_carry_the_json_rpc_messages() -> None:
    guard = make_guard()
    async with Client(make_server([])) as client, guard.engagement() as eng:
        tools = GuardedClient(client, guard)
        await tools.list_tools()
        await tools.call_tool("lookup_order", {"order_id": "A-1"})
    mcp_steps = [s for s in eng.steps if s.kind == "protocols/MCP"]
    messages = [s.aos[0]["params"]["message"] for s in mcp_steps]
    assert [m.get("method") for m in messages] == ["tools/list", None, "tools/call", None]
    assert messages[2]["params"] == {"name": "lookup_order", "arguments": {"order_id": "A-1"}}
    assert messages[3]["id"] == messages[2]["id"]
    assert messages[3]["result"]["structuredContent"] == {"order_id": "A-1", "status": "shipped"}
    assert {t["name"] for t in messages[1]["result"]["tools"]} >= {"delete_everything"}  # as received
    assert all(s.outcome is Outcome.ALLOW for s in mcp_steps)


async def test_prefix_and_mapping_name_the_capabilities() -> None:
    guard = make_guard()
    async with Client(make_server([])) as client, guard.engagement() as eng:
        tools = GuardedClient(client, guard, prefix="shop.", names={"lookup_order": "lookup-order"})
        listed = await tools.list_tools()
        found = await tools.call_tool("lookup_order", {"order_id": "A-1"})
        other = await tools.call_tool("send_email", {"to": "bob@corp.com", "body": "x"})
    assert [t.name for t in listed.tools] == ["lookup_order"]  # shop.send-email is not a capability
    assert not found.is_error
    assert other.is_error
    assert "'shop.send-email'" in _text(other)
    assert eng.state.names == ["lookup-order"]


async def test_paths_past_the_guard_are_refused() -> None:
    guard = make_guard()
    async with Client(make_server([])) as client:
        tools = GuardedClient(client, guard)
        assert tools.protocol_version == client.protocol_version
        with pytest.raises(AttributeError, match="past the guard"):
            tools.session  # noqa: B018 - the attribute access is what is refused


async def test_guardian_deny_reaches_the_model_and_modify_reaches_the_tool(guardian: RunningServer) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    guard = make_guard(guardian=GuardianClient(guardian.url))
    async with Client(make_server(ran)) as client, guard.engagement(user=User(id="u1")) as eng:
        tools = GuardedClient(client, guard)
        denied = await tools.call_tool("lookup_order", {"order_id": "X-9"})
        sent = await tools.call_tool("send_email", {"to": "bob@corp.com", "body": "secret plans"})
    assert denied.is_error
    assert "Orders of another tenant" in _text(denied)
    assert ran == [("send_email", {"to": "bob@corp.com", "body": "[redacted]"})]
    assert not sent.is_error
    outcomes = [(s.name, s.outcome) for s in eng.steps if s.kind == "steps/toolCallRequest"]
    assert outcomes == [("lookup-order", Outcome.DENY), ("send-email", Outcome.MODIFY)]
