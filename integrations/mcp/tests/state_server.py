"""An MCP server that keeps state for as long as it runs (``note`` adds one, ``notes`` reads them all), served
on stdio as a real subprocess: ``python state_server.py LOG`` appends ``start <pid>`` to LOG when it starts and
``stop <pid>`` when it ends. A proxy that shared one such server among its clients would show each the others'
notes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, Tool

NOTES: list[str] = []


async def _list(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
    return ListToolsResult(
        tools=[Tool(name=name, input_schema={"type": "object"}) for name in ("note", "notes")]
    )


async def _call(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
    if params.name == "note":
        NOTES.append(str((params.arguments or {}).get("text")))
    return CallToolResult(content=[{"type": "text", "text": ",".join(NOTES)}])


async def _serve(log: Path) -> None:
    with log.open("a") as out:
        out.write(f"start {os.getpid()}\n")
    try:
        server = Server("state", on_list_tools=_list, on_call_tool=_call)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        with log.open("a") as out:
            out.write(f"stop {os.getpid()}\n")


if __name__ == "__main__":
    anyio.run(_serve, Path(sys.argv[1]))
