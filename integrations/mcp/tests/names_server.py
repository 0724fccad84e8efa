"""An MCP server whose tool names map to one capability more than once, which serves a tool it does not list,
and whose list can grow or page without end; in process, or as a real subprocess over stdio
(``python names_server.py TOOL ...``). Each tool answers ``ran <its name>``."""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, Tool

UNLISTED = "wipe"
"""Served, never listed."""


def make_server(listed: list[str], *, endless: bool = False) -> Server[Any]:
    """Lists ``listed`` (the list is read on every listing: a test may add to it); with ``endless``, every
    page names a next one."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = [Tool(name=name, input_schema={"type": "object"}) for name in listed]
        return ListToolsResult(tools=tools, next_cursor="more" if endless else None)

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        if params.name not in listed and params.name != UNLISTED:
            raise ValueError(f"no tool {params.name!r}")
        return CallToolResult(content=[{"type": "text", "text": f"ran {params.name}"}])

    return Server("names", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve(listed: list[str]) -> None:
    server = make_server(listed)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_serve, sys.argv[1:])
