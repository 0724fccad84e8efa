"""The shop's MCP server for the tests, in process or as a real subprocess over stdio or streamable HTTP.

``python shop_server.py [--spec FILE] [--listen HOST:PORT] [--log FILE]``: ``--spec`` guards it with
:class:`~agentguard_mcp.GuardMiddleware` (the server side); ``--log`` appends one JSON line per tool that
really ran, so a test can tell that a denied call never reached the tool.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentguard_mcp import guard_server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from agentguard import Guard


def make_server(ran: list[tuple[str, dict[str, Any]]], log: Path | None = None, **options: Any) -> MCPServer:
    """The shop's tools; each records its run in ``ran`` (and ``log``). ``options`` go to ``MCPServer``."""
    server = MCPServer("shop", **options)

    def record(name: str, **args: Any) -> None:
        ran.append((name, args))
        if log is not None:
            with log.open("a") as f:
                f.write(json.dumps([name, args]) + "\n")

    @server.tool()
    def lookup_order(order_id: str) -> dict[str, str]:
        """Look an order up by its id."""
        record("lookup_order", order_id=order_id)
        return {"order_id": order_id, "status": "shipped"}

    @server.tool(structured_output=False)  # text, as a Python tool's str: not wrapped in {"result": ...}
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        record("send_email", to=to, body=body)
        return f"sent to {to}"

    @server.tool()
    def refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an order."""
        record("refund", order_id=order_id, amount=amount)
        return {"order_id": order_id, "refunded": amount}

    @server.tool()
    def web_search(query: str) -> dict[str, Any]:
        """Search the web."""
        record("web_search", query=query)
        return {"results": [f"SECRET-{query}-{i}" for i in range(5 if "many" in query else 1)]}

    @server.tool(structured_output=False)
    def flaky(message: str) -> str:
        """Always fails, with ``message`` in its error."""
        record("flaky", message=message)
        raise ToolError(message)  # a deliberate error: its text reaches the client as an isError result

    @server.tool()
    def delete_everything() -> str:
        """Not a capability of the shop agent."""
        record("delete_everything")
        return "deleted"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec")
    parser.add_argument("--listen")
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()
    server = make_server([], args.log)
    if args.spec:
        guard_server(server, Guard.from_file(args.spec, reviewers={"supervisor": lambda r: True}))
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        server.run("streamable-http", host=host, port=int(port))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
