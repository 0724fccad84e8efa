"""An MCP server whose tool names map to one capability more than once, which serves a tool it does not list,
and whose list can grow or page without end; in process, or as a real subprocess over stdio
(``python names_server.py [--endless] [--count FILE] [--guard SPEC] [--surrogate] [--broken] TOOL ...``: ``--count``
appends a line to ``FILE`` for each ``tools/list`` request it answers, ``--guard`` enforces ``SPEC`` with
:func:`agentguard_mcp.guard_server`). Each tool answers ``ran <its name>`` (with ``--surrogate``, followed by a
lone surrogate, text no UTF-8 message can carry; a tool ``fail`` then fails with such a JSON-RPC error)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
from agentguard_mcp import guard_server
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, Tool

from agentguard import Guard

UNLISTED = "wipe"
"""Served, never listed."""


def make_server(
    listed: list[str],
    *,
    endless: bool = False,
    count: str | None = None,
    surrogate: bool = False,
    broken: bool = False,
) -> Server[Any]:
    """Lists ``listed`` (the list is read on every listing: a test may add to it); with ``endless``, every
    page names a next one; with ``count``, each listing appends a line to that file; with ``broken``, every
    listing fails."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        if count is not None:
            async with await anyio.open_file(count, "a") as log:
                await log.write("tools/list\n")
        if broken:
            raise ValueError("the tool list is broken")
        tools = [Tool(name=name, input_schema={"type": "object"}) for name in listed]
        return ListToolsResult(tools=tools, next_cursor="more" if endless else None)

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        if params.name not in listed and params.name != UNLISTED:
            raise ValueError(f"no tool {params.name!r}")
        if surrogate and params.name == "fail":
            raise MCPError(-32001, "failed \ud800")
        text = f"ran {params.name}" + (" \ud800" if surrogate else "")
        return CallToolResult(content=[{"type": "text", "text": text}])

    return Server("names", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endless", action="store_true")
    parser.add_argument("--count")
    parser.add_argument("--guard")
    parser.add_argument("--surrogate", action="store_true")
    parser.add_argument("--broken", action="store_true")
    parser.add_argument("tools", nargs="*")
    args = parser.parse_args(argv)
    server = make_server(
        args.tools, endless=args.endless, count=args.count, surrogate=args.surrogate, broken=args.broken
    )
    if args.guard is not None:
        guard_server(server, Guard.from_file(args.guard))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_serve, sys.argv[1:])
