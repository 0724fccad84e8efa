"""agentguard for the Model Context Protocol (``mcp`` 2.3): guard tool calls on both sides of MCP.

A client whose tool calls are guarded::

    from mcp import Client
    from agentguard import Guard, User
    from agentguard_mcp import GuardedClient

    guard = Guard.from_file("agent.yaml")
    async with Client(server) as client, guard.engagement(user=User(id="u1")):
        tools = GuardedClient(client, guard, prefix="shop.")
        listed = await tools.list_tools()                      # only the spec's capabilities
        result = await tools.call_tool("send_email", {"to": "eve@evil.test", "body": "hi"})
        result.is_error                                        # True: the denial names the rule

A server that enforces a spec on incoming calls, with the user from the request's auth context::

    server = MCPServer("shop", middleware=[GuardMiddleware(guard)])

And a proxy in front of a server one cannot change: ``agentguard-mcp-proxy --spec agent.yaml -- COMMAND``
(see :mod:`agentguard_mcp.proxy`). Every JSON-RPC request and response is recorded as an AOS
``protocols/MCP`` step.
"""

from agentguard_mcp._calls import Names
from agentguard_mcp._client import GuardedClient
from agentguard_mcp._server import (
    ANONYMOUS,
    FULL,
    NO_SESSION,
    STOPPED,
    GuardMiddleware,
    default_engagement_key,
    guard_server,
    session_id,
    user_from_auth,
)
from agentguard_mcp.proxy import build_proxy

__version__ = "0.1.0"

__all__ = [
    "ANONYMOUS",
    "FULL",
    "NO_SESSION",
    "STOPPED",
    "GuardMiddleware",
    "GuardedClient",
    "Names",
    "__version__",
    "build_proxy",
    "default_engagement_key",
    "guard_server",
    "session_id",
    "user_from_auth",
]
