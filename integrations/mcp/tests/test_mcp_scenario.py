"""The same spec gives the same decisions on the same calls through plain Python and through MCP."""

from __future__ import annotations

import contextlib
from typing import Any

from agentguard_mcp import GuardedClient
from mcp import Client

from agentguard import CapabilityDenied, Engagement, RestrictionViolation

from .conftest import make_guard
from .shop_server import make_server

SCENARIO: list[tuple[str, str, dict[str, Any]]] = [
    ("lookup_order", "lookup-order", {"order_id": "A-1"}),
    ("send_email", "send-email", {"to": "eve@evil.test", "body": "x"}),
    ("send_email", "send-email", {"to": "bob@corp.com", "body": "x"}),
    ("delete_everything", "delete-everything", {}),
    ("web_search", "web-search", {"query": "many"}),
    ("refund", "refund", {"order_id": "A-1", "amount": 30}),
    ("lookup_order", "lookup-order", {"order_id": "A-2"}),
]

TOOLS = {
    "lookup-order": lambda order_id: {"order_id": order_id, "status": "shipped"},
    "send-email": lambda to, body: f"sent to {to}",
    "delete-everything": lambda: "deleted",
    "web-search": lambda query: {"results": [f"SECRET-{query}-{i}" for i in range(5)]},
    "refund": lambda order_id, amount: {"order_id": order_id, "refunded": float(amount)},
}


def _decisions(eng: Engagement) -> list[tuple[str | None, str, str]]:
    return [
        (s.name, d.rule.value, d.outcome.value)
        for s in eng.steps
        if s.kind == "steps/toolCallRequest"
        for d in s.decisions
    ]


async def test_shared_scenario_same_decisions_as_plain_python() -> None:
    through_mcp = make_guard()
    async with Client(make_server([])) as client, through_mcp.engagement() as via_mcp:
        tools = GuardedClient(client, through_mcp)
        for mcp_name, _, args in SCENARIO:
            await tools.call_tool(mcp_name, args)

    plain = make_guard()
    with plain.engagement() as direct:
        for _, name, args in SCENARIO:
            with contextlib.suppress(RestrictionViolation, CapabilityDenied):
                plain.call(name, args, TOOLS[name])
    assert _decisions(via_mcp) == _decisions(direct)
    assert via_mcp.view()["history"] == direct.view()["history"]
