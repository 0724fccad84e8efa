"""An MCP server that enforces an OpenAgentSpec on its own tools, driven by the MCP SDK's client (offline).

Run it: ``python examples/mcp_guarded_server.py``. The same middleware guards any ``MCPServer`` or low-level
``Server``; ``agentguard-mcp-proxy --spec agent.yaml -- COMMAND`` puts it in front of a server you cannot change.
"""

from __future__ import annotations

import asyncio

from agentguard_mcp import GuardMiddleware
from mcp import Client, MCPError
from mcp.server.mcpserver import MCPServer

from agentguard import Guard
from agentguard.timeline import print_timeline

SPEC = """
kind: openagentspec:v1/agent
name: mailer
description: Sends mail for the team.
intent: You email colleagues.
owner: team@corp.com
capabilities:
  send-email:
    input_restriction:
      assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
  lookup-order:
lifespan:
  short_circuit: 3
"""


def build_server(middleware: GuardMiddleware) -> MCPServer:
    server = MCPServer("mailer", middleware=[middleware])

    @server.tool(structured_output=False)
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        print(f"  (send_email ran: {to})")
        return f"sent to {to}"

    @server.tool()
    def lookup_order(order_id: str) -> dict[str, str]:
        """Look an order up."""
        return {"order_id": order_id, "status": "shipped"}

    @server.tool()
    def delete_everything() -> str:
        """Not in the spec: never offered, never run."""
        return "deleted"

    return server


async def main() -> None:
    middleware = GuardMiddleware(Guard.from_yaml(SPEC))
    async with Client(build_server(middleware)) as client:
        listed = await client.list_tools()
        print("offered tools:", sorted(t.name for t in listed.tools))
        for to in ("bob@corp.com", "eve@evil.test"):
            result = await client.call_tool("send_email", {"to": to, "body": "hi"})
            print(f"send_email to {to}: isError={result.is_error}: {result.content[0].text}")
        try:
            for _ in range(3):
                await client.call_tool("lookup_order", {"order_id": "A-1"})
        except MCPError as exc:
            print(f"loop stopped: JSON-RPC error {exc.code}: rule {exc.data['rule']}")
    print_timeline(middleware.engagements["anonymous"])  # one engagement: no auth, one client


if __name__ == "__main__":
    asyncio.run(main())
