"""The one place that imports the MCP SDK: a missing or too-old ``mcp`` fails with one clear error. Every other
module of this package imports SDK names from here."""

from __future__ import annotations

try:
    from mcp import Client, ClientSession, StdioServerParameters
    from mcp.server import Server
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.shared.exceptions import MCPError, NoBackChannelError
    from mcp_types import CallToolResult, ListToolsResult, PaginatedRequestParams
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as exc:  # pragma: no cover - exercised only without the host installed
    raise ImportError(f"agentguard-mcp needs mcp>=2.3,<3 ({exc}): pip install agentguard-mcp") from exc

__all__ = [
    "MODERN_PROTOCOL_VERSIONS",
    "CallNext",
    "CallToolResult",
    "Client",
    "ClientSession",
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
    "get_access_token",
]
