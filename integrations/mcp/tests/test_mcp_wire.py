"""Text no MCP message can carry. A JSON ``\\ud800`` escape decodes (``json.loads``, as a host reads its
model's tool calls) to a lone surrogate, which no UTF-8 message holds: the SDK's stdio transport fails to
write a request with one, and the failure ended the client's whole connection; a server's answer with one was
never written, and its client waited for ever. ``GuardedClient`` refuses such a call with a JSON-RPC error
before anything is sent, and ``GuardMiddleware`` withholds such an answer; against the names server as a real
subprocess."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from agentguard_mcp import GuardedClient
from mcp import Client, MCPError, StdioServerParameters

from agentguard import Guard

HERE = Path(__file__).resolve().parent
SPEC = HERE / "wire-agent.yaml"
SAME_CODE = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else None
"""The environment a subprocess needs to run the code this test runs (the SDK hands a server few variables)."""


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("\ud800", {}), ("wipe", {"to": "\ud800"}), ("wipe", {"to": ["ok", {"deep": "a\udfffb"}]})],
)
async def test_a_call_whose_name_or_arguments_are_not_unicode_is_refused_before_it_is_sent(
    name: str, arguments: dict[str, Any]
) -> None:
    guard = Guard.from_file(SPEC)
    server = StdioServerParameters(
        command=sys.executable, args=[str(HERE / "names_server.py"), "send_email", "wipe"], env=SAME_CODE
    )
    async with Client(server) as client:
        with guard.engagement() as eng:
            tools = GuardedClient(client, guard)
            with pytest.raises(MCPError) as refused:
                await tools.call_tool(name, arguments)
            after = await tools.call_tool("wipe", {})  # the connection goes on
    assert refused.value.code == -32602
    assert "not valid Unicode" in refused.value.message
    assert not after.is_error
    assert [block.text for block in after.content if block.type == "text"] == ["ran wipe"]
    assert eng.view()["history"]["_total"] == 1  # only the later call ran


@pytest.mark.parametrize("tool", ["wipe", "fail"])  # a result, a JSON-RPC error
async def test_a_guarded_servers_answer_that_is_not_unicode_is_withheld_not_left_unanswered(
    tool: str,
) -> None:
    args = [str(HERE / "names_server.py"), "--guard", str(SPEC), "--surrogate", "wipe", "fail"]
    server = StdioServerParameters(command=sys.executable, args=args, env=SAME_CODE)
    async with Client(server) as client:
        with anyio.fail_after(60), pytest.raises(MCPError) as withheld:  # before: no answer, ever
            await client.call_tool(tool, {})
    assert withheld.value.code == -32603
    assert "not valid Unicode" in withheld.value.message
