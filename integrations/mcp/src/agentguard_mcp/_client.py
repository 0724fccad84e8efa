"""The client side: an MCP ``Client`` or ``ClientSession`` whose ``tools/call`` and ``tools/list`` go through a
Guard. The SDK has no client middleware, so the session is wrapped rather than patched."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from agentguard import Guard
from agentguard_mcp._calls import (
    CALL_TIMEOUT,
    MAX_LISTING_PAGES,
    MAX_RESULT_BYTES,
    MAX_TOOL_BYTES,
    MAX_TOOLS,
    RELIST_INTERVAL,
    Catalog,
    Names,
    Wire,
    guarded_call,
    guarded_listing,
    wire,
)
from agentguard_mcp._host import (
    CallToolResult,
    Client,
    ClientSession,
    ListToolsResult,
    PaginatedRequestParams,
    ProgressFnT,
)

__all__ = ["GuardedClient"]

_PASSTHROUGH = frozenset(
    {
        "list_resources",
        "list_resource_templates",
        "read_resource",
        "list_prompts",
        "get_prompt",
        "complete",
        "protocol_version",
        "server_info",
        "server_capabilities",
        "instructions",
    }
)
"""What the wrapper hands on untouched: requests that call no tool. Anything else of the wrapped session
(``send_request``, ``session``, ...) could send a ``tools/call`` past the guard, so it is refused."""

_ids = itertools.count(1)


class GuardedClient:
    """Guards an MCP client: every ``call_tool`` runs through ``guard.acall`` inside the current engagement.

    ::

        async with Client(server) as client, guard.engagement(user=User(id="u1")):
            tools = GuardedClient(client, guard, prefix="time.")
            listed = await tools.list_tools()          # only the spec's capabilities are offered
            result = await tools.call_tool("get_current_time", {"timezone": "UTC"})

    The capability is the MCP tool name mapped by ``prefix`` / ``names`` (see :class:`Names`), among the tools
    the server lists: a name not seen in a listing is looked up in a fresh one first, unless the list was read
    within ``relist_interval`` seconds (:class:`Catalog`). A denial the model can recover from comes back as a
    ``CallToolResult`` with ``is_error=True`` naming the rule; a loop stop or failed guardrail raises
    agentguard's typed error. Each request and response is recorded as an AOS ``protocols/MCP`` step.

    The server is not trusted to answer, nor to answer within reason: a call it does not answer within
    ``call_timeout`` seconds is a recorded denial (an ``is_error`` result) and its request is cancelled; an
    answer larger than ``max_result_bytes``, a listing of more than ``max_tools`` tools, or an offered tool
    whose entry is larger than ``max_tool_bytes`` is refused with an ``MCPError`` (see :class:`Catalog`).
    """

    def __init__(
        self,
        client: Client | ClientSession,
        guard: Guard,
        *,
        prefix: str = "",
        names: Mapping[str, str] | None = None,
        relist_interval: float = RELIST_INTERVAL,
        max_listing_pages: int = MAX_LISTING_PAGES,
        call_timeout: float = CALL_TIMEOUT,
        max_result_bytes: int = MAX_RESULT_BYTES,
        max_tools: int = MAX_TOOLS,
        max_tool_bytes: int = MAX_TOOL_BYTES,
    ) -> None:
        self._client = client
        self.guard = guard
        self.catalog = Catalog(
            Names(prefix, dict(names or {})),
            relist_interval=relist_interval,
            max_listing_pages=max_listing_pages,
            call_timeout=call_timeout,
            max_result_bytes=max_result_bytes,
            max_tools=max_tools,
            max_tool_bytes=max_tool_bytes,
        )

    async def list_tools(self, **kwargs: Any) -> ListToolsResult:
        """The server's tools, less those that stand for no capability of the spec, each text written for the
        model made visible (a control or bidi character shown as its escape)."""

        async def fetch() -> Wire:
            return wire(await self._client.list_tools(**kwargs))

        request = {"jsonrpc": "2.0", "id": f"agentguard-{next(_ids)}", "method": "tools/list"}
        first = kwargs.get("cursor") is None and getattr(kwargs.get("params"), "cursor", None) is None
        return ListToolsResult.model_validate(
            await guarded_listing(self.guard, self.catalog, request, fetch, first=first)
        )

    async def _page(self, cursor: str | None) -> Wire:
        """One page of the server's tool list, read fresh (not from the client's cache) for the catalog."""
        if isinstance(self._client, ClientSession):
            return wire(await self._client.list_tools(params=PaginatedRequestParams(cursor=cursor)))
        return wire(await self._client.list_tools(cursor=cursor, cache_mode="refresh"))

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any
    ) -> CallToolResult:
        """``tools/call`` through the guard; keyword options (timeouts, ``meta``) go to the wrapped client.

        A ``progress_callback`` hears how far the call has got but not the server's message: that is the
        tool's text, sent while it runs, before its result is checked.
        """
        progress = kwargs.get("progress_callback")
        if progress is not None:
            kwargs["progress_callback"] = _untold(progress)

        async def send(inputs: dict[str, Any]) -> dict[str, Any]:
            return wire(await self._client.call_tool(name, inputs, **kwargs))

        result = await guarded_call(
            self.guard,
            self.catalog,
            name,
            arguments or {},
            send,
            f"agentguard-{next(_ids)}",
            list_page=self._page,
        )
        return CallToolResult.model_validate(result)

    def __getattr__(self, attr: str) -> Any:
        if attr in _PASSTHROUGH:
            return getattr(self._client, attr)
        raise AttributeError(
            f"GuardedClient does not offer {attr!r}: it could reach tools past the guard "
            "(use call_tool / list_tools, or the unwrapped client deliberately)"
        )


def _untold(callback: ProgressFnT) -> ProgressFnT:
    """``callback`` called without the message of each progress notification."""

    async def report(progress: float, total: float | None, message: str | None) -> None:
        await callback(progress, total, None)

    return report
