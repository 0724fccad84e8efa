"""``agentguard-mcp-proxy``: guard a third-party MCP server without touching its code.

::

    agentguard-mcp-proxy --spec agent.yaml -- uvx mcp-server-time          # stdio to the client and the server
    agentguard-mcp-proxy --spec agent.yaml --listen 127.0.0.1:8765 -- mcp-server-time   # streamable HTTP
    agentguard-mcp-proxy --spec agent.yaml --upstream http://127.0.0.1:9000/mcp         # a remote HTTP server

The proxy is an MCP server whose ``tools/list`` and ``tools/call`` handlers forward to the upstream server
through the SDK's ``Client``, with :class:`~agentguard_mcp.GuardMiddleware` in front: the same checks, the
same results, as a server that guards itself. Only tools are proxied; resources and prompts are not offered.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from agentguard import Guard
from agentguard_mcp._host import (
    CallToolResult,
    Client,
    ListToolsResult,
    PaginatedRequestParams,
    Server,
    ServerRequestContext,
    StdioServerParameters,
)
from agentguard_mcp._server import guard_server

__all__ = ["build_proxy", "main", "serve"]

Upstream = StdioServerParameters | str


def build_proxy(guard: Guard, upstream: Upstream, **options: Any) -> Server[Client]:
    """A guarded MCP server forwarding tools to ``upstream`` (a command to start, or a streamable HTTP URL).

    The upstream connection is opened once, in the server's lifespan. ``options`` go to
    :class:`~agentguard_mcp.GuardMiddleware` (``prefix``, ``names``, ``engagement_key``, ...).
    """

    @asynccontextmanager
    async def connect(_: Server[Client]) -> AsyncIterator[Client]:
        async with Client(upstream, cache=None) as client:  # the proxy must see every listing it filters
            yield client

    async def list_tools(
        ctx: ServerRequestContext[Client], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return await ctx.lifespan_context.list_tools(cursor=params.cursor if params else None)

    async def call_tool(ctx: ServerRequestContext[Client], params: Any) -> CallToolResult:
        return await ctx.lifespan_context.call_tool(params.name, params.arguments)

    server: Server[Client] = Server(
        "agentguard-mcp-proxy", lifespan=connect, on_list_tools=list_tools, on_call_tool=call_tool
    )
    guard_server(server, guard, **options)
    return server


async def serve(server: Server[Any], listen: str | None = None) -> None:
    """Serve over stdio, or over streamable HTTP on ``listen`` (``HOST:PORT``)."""
    if listen is None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    host, _, port = listen.rpartition(":")
    app = server.streamable_http_app(host=host)
    await uvicorn.Server(uvicorn.Config(app, host=host, port=int(port), log_level="warning")).serve()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentguard-mcp-proxy",
        description="Guard an MCP server's tools with an OpenAgentSpec policy, as a proxy in front of it.",
    )
    parser.add_argument("--spec", required=True, help="the OpenAgentSpec file to enforce")
    parser.add_argument("--listen", metavar="HOST:PORT", help="serve streamable HTTP here instead of stdio")
    parser.add_argument("--upstream", metavar="URL", help="guard a remote streamable HTTP server")
    parser.add_argument("--prefix", default="", help="spec name prefix of the server's tools, e.g. 'time.'")
    parser.add_argument("--guardian", metavar="URL", help="an AOS guardian asked about every step")
    parser.add_argument(
        "--elicit-reviews",
        action="store_true",
        help="ask the MCP client, through elicitation, to approve the calls the spec puts under require_review "
        "(the proxy has no reviewer of its own: without this, such a spec is refused at start-up)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the server command and its arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The console script; ``agentguard mcp-proxy`` runs the same function."""
    args = _parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.upstream):
        print("agentguard-mcp-proxy: give either --upstream URL or -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    options: dict[str, Any] = {}
    if args.guardian:
        from agentguard.guardian import GuardianClient

        options["guardian"] = GuardianClient(args.guardian)
    guard = Guard.from_file(args.spec, **options)
    upstream: Upstream = args.upstream or StdioServerParameters(command=command[0], args=command[1:])
    server = build_proxy(guard, upstream, prefix=args.prefix, elicit_reviews=args.elicit_reviews)
    missing = guard.missing_configuration()
    if missing:  # e.g. a guardrail tool the spec names: a proxy has no Python tools to register
        print("agentguard-mcp-proxy: the spec needs:\n  - " + "\n  - ".join(missing), file=sys.stderr)
        if not args.elicit_reviews and guard.required_reviewers():
            print("  (a reviewer can be the MCP client's user: --elicit-reviews)", file=sys.stderr)
        return 2
    anyio.run(serve, server, args.listen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
