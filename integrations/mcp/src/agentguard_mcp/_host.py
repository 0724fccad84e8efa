"""The one place that imports the MCP SDK: a missing or too-old ``mcp`` fails with one clear error. Every other
module of this package imports SDK names from here."""

from __future__ import annotations

from typing import Any

try:
    from mcp import Client, ClientSession, StdioServerParameters
    from mcp.server import Server
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.connection import Connection
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.shared.exceptions import MCPError, NoBackChannelError
    from mcp_types import (
        INTERNAL_ERROR,
        INVALID_PARAMS,
        REQUEST_TIMEOUT,
        CallToolResult,
        ListToolsResult,
        PaginatedRequestParams,
    )
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as exc:  # pragma: no cover - exercised only without the host installed
    raise ImportError(f"agentguard-mcp needs mcp>=2.3,<3 ({exc}): pip install agentguard-mcp") from exc

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "MODERN_PROTOCOL_VERSIONS",
    "REQUEST_TIMEOUT",
    "CallNext",
    "CallToolResult",
    "Client",
    "ClientSession",
    "Connection",
    "HandlerResult",
    "ListToolsResult",
    "MCPError",
    "MCPServer",
    "NoBackChannelError",
    "PaginatedRequestParams",
    "ProgressFnT",
    "Server",
    "ServerRequestContext",
    "StdioServerParameters",
    "connection_of",
    "get_access_token",
]


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection | None:
    """The ``Connection`` a request arrived on, or ``None`` if this SDK does not say.

    SDK 2.3 hands middleware a ``ServerSession`` built for each request; the connection it wraps (one per
    stdio or 2025 streamable HTTP session, one per request on the 2026-07-28 protocol) carries the session id
    and the ``exit_stack`` "middleware may push cleanup onto", but is reachable from a middleware's context
    only as ``session._connection`` (``Context.connection``, the public accessor, is not built for middleware
    yet). Callers treat ``None`` as "no session", which refuses rather than shares.
    """
    connection = getattr(ctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None
