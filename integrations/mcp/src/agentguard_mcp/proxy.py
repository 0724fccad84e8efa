"""``agentguard-mcp-proxy``: guard a third-party MCP server without touching its code.

::

    agentguard-mcp-proxy --spec agent.yaml -- uvx mcp-server-time          # stdio to the client and the server
    agentguard-mcp-proxy --spec agent.yaml --listen 127.0.0.1:8765 -- mcp-server-time   # streamable HTTP
    agentguard-mcp-proxy --spec agent.yaml --upstream http://127.0.0.1:9000/mcp         # a remote HTTP server
    agentguard-mcp-proxy --spec agent.yaml --listen 0.0.0.0:8765 --token-env TOKEN_VAR -- mcp-server-time

The proxy is an MCP server whose ``tools/list`` and ``tools/call`` handlers forward to the upstream server
through the SDK's ``Client`` (one connection per MCP session, :class:`Upstreams`), with
:class:`~agentguard_mcp.GuardMiddleware` in front: the same checks, the same results, as a server that guards
itself. Only tools are proxied; resources and prompts are not offered.
Over HTTP each MCP session is an engagement of its own (a client without a session is refused unless
``--shared-engagement``), and the proxy listens as agentguard's other servers do (:mod:`agentguard.serving`):
beyond loopback only with a bearer token (``--token-env``) or ``--insecure-open``, and within the same limits
(a deadline for each request head and for each body, a cap on open connections, the largest head and body).
The upstream server is bounded too: an answer within ``--call-timeout`` seconds (a call past it is a recorded
denial, its request cancelled), of at most ``--max-result-bytes``, a listing of at most ``--max-tools`` tools,
each offered tool's entry at most ``--max-tool-bytes``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup

from agentguard import Guard, serving
from agentguard_mcp._calls import (
    CALL_TIMEOUT,
    MAX_LISTING_PAGES,
    MAX_RESULT_BYTES,
    MAX_TOOL_BYTES,
    MAX_TOOLS,
    RELIST_INTERVAL,
)
from agentguard_mcp._host import (
    INTERNAL_ERROR,
    CallToolResult,
    Client,
    ListToolsResult,
    MCPError,
    PaginatedRequestParams,
    Server,
    ServerRequestContext,
    StdioServerParameters,
    connection_of,
)
from agentguard_mcp._server import FULL, guard_server

__all__ = ["RequireBearerToken", "Upstreams", "build_proxy", "main", "serve"]

Upstream = StdioServerParameters | str

REALM = "agentguard-mcp-proxy"

MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest request body over HTTP by default: the MCP SDK's own default (``--max-body-bytes``)."""

BODY_TIMEOUT = 10.0
"""Seconds a request's whole body has over HTTP by default (``--body-timeout``)."""

_DEFAULT_LIMITS = (serving.ServerLimits(), MAX_BODY_BYTES, BODY_TIMEOUT)
"""The HTTP limits when no option sets them: on stdio, any other is a mistake."""

EXPOSURE = "call the guarded tools"
"""What anyone who can reach a proxy without a token could do."""


def build_proxy(
    guard: Guard,
    upstream: Upstream,
    *,
    upstream_per_session: bool = True,
    max_upstreams: int = 64,
    **options: Any,
) -> Server[Upstreams]:
    """A guarded MCP server forwarding tools to ``upstream`` (a command to start, or a streamable HTTP URL).

    Each MCP session of the proxy gets its own upstream connection (:class:`Upstreams`), so an upstream server
    that keeps state per session (a login, a browser page, a transaction) never shows one client what another
    did there; ``upstream_per_session=False`` shares one among all. ``options`` go to
    :class:`~agentguard_mcp.GuardMiddleware` (``prefix``, ``names``, ``engagement_key``, ...).
    """

    @asynccontextmanager
    async def connect(_: Server[Upstreams]) -> AsyncIterator[Upstreams]:
        async with anyio.create_task_group() as holders:
            upstreams = Upstreams(upstream, holders, per_session=upstream_per_session, limit=max_upstreams)
            try:
                yield upstreams
            finally:
                upstreams.close_all()

    async def list_tools(
        ctx: ServerRequestContext[Upstreams], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        client = await ctx.lifespan_context.client_for(ctx)
        return await client.list_tools(cursor=params.cursor if params else None)

    async def call_tool(ctx: ServerRequestContext[Upstreams], params: Any) -> CallToolResult:
        client = await ctx.lifespan_context.client_for(ctx)
        return await client.call_tool(params.name, params.arguments)

    server: Server[Upstreams] = Server(
        "agentguard-mcp-proxy", lifespan=connect, on_list_tools=list_tools, on_call_tool=call_tool
    )
    guard_server(server, guard, **options)
    return server


class _Held:
    """One upstream connection, held open by a task of its own until ``closed`` is set."""

    def __init__(self) -> None:
        self.ready = anyio.Event()
        self.closed = anyio.Event()
        self.client: Client | None = None
        self.error: BaseException | None = None


class Upstreams:
    """The proxy's upstream connections: one per MCP session of the proxy (one in all without a session: stdio,
    or ``per_session=False``), opened at the session's first request and closed when it ends.

    A ``Client`` runs tasks of its own (a subprocess's pipes, an HTTP stream), which must be entered and left in
    one task; so each connection is held by a task of the proxy's lifespan, and requests borrow it. At most
    ``limit`` are open: a session that would open one more is refused (:data:`~agentguard_mcp.FULL`).
    """

    def __init__(self, upstream: Upstream, holders: TaskGroup, *, per_session: bool, limit: int) -> None:
        self._upstream = upstream
        self._holders = holders
        self._per_session = per_session
        self._limit = limit
        self._held: dict[str, _Held] = {}

    async def client_for(self, ctx: ServerRequestContext[Any]) -> Client:
        """The upstream connection of ``ctx``'s session, opened now if it is its first request."""
        connection = connection_of(ctx) if self._per_session else None
        key = connection.session_id if connection is not None and connection.session_id is not None else ""
        held = self._held.get(key)
        if held is None:
            if len(self._held) >= self._limit:
                raise MCPError(
                    FULL,
                    f"agentguard-mcp-proxy: {len(self._held)} upstream connections are open, the most it keeps",
                )
            held = self._held[key] = _Held()
            self._holders.start_soon(self._hold, key, held)
            if key and connection is not None:
                connection.exit_stack.callback(held.closed.set)
        await held.ready.wait()
        if held.client is None:
            raise MCPError(
                INTERNAL_ERROR, f"agentguard-mcp-proxy: the upstream server is not reachable ({held.error})"
            )
        return held.client

    async def _hold(self, key: str, held: _Held) -> None:
        try:
            # cache=None: the proxy must see every listing it filters
            async with Client(self._upstream, cache=None) as client:
                held.client = client
                held.ready.set()
                await held.closed.wait()
        except Exception as exc:  # told to the requests waiting for it, and to the next one
            held.error = exc
        finally:
            held.client = None
            held.ready.set()
            if self._held.get(key) is held:
                del self._held[key]

    def close_all(self) -> None:
        for held in self._held.values():
            held.closed.set()


def _jsonrpc_error(status: int, message: str) -> dict[str, Any]:
    """A refusal over HTTP, as a JSON-RPC error without an id (the request was not read)."""
    code = -32001 if status == 401 else -32000
    why = _WHY.get(status)
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": code, "message": f"{message}: {why}" if why else message},
    }


_WHY = {401: "this proxy needs its bearer token", 408: "send the request body sooner"}
_REFUSAL = serving.json_refusal(_jsonrpc_error)


class RequireBearerToken(serving.RequireBearerToken):
    """:class:`agentguard.serving.RequireBearerToken` as the proxy refuses: a JSON-RPC error (``-32001``)."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app, token, realm=REALM, refuse=_REFUSAL)


async def serve(
    server: Server[Any],
    listen: str | None = None,
    *,
    token: str | None = None,
    insecure_open: bool = False,
    limits: serving.ServerLimits | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout: float = BODY_TIMEOUT,
) -> None:
    """Serve over stdio, or over streamable HTTP on ``listen`` (``HOST:PORT``), where every request must
    carry ``token`` when there is one (:class:`RequireBearerToken`). Without a token only a loopback address
    is served, unless ``insecure_open`` (``ValueError``).

    Over HTTP, the connections are bounded by ``limits`` (default :class:`~agentguard.serving.ServerLimits`:
    a deadline for each request head, a cap on open connections, ...), and each request's body by
    ``max_body_bytes`` (``413``) and by ``body_timeout`` seconds in all (``408``).
    """
    if listen is None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    host, port = _host_port(listen)
    problem = serving.exposure_problem(host, token=token, insecure_open=insecure_open, what=EXPOSURE)
    if problem is not None:
        raise ValueError(problem)
    mcp_app = server.streamable_http_app(host=host, max_request_body_size=max_body_bytes)
    app: Any = serving.BodyDeadline(mcp_app, body_timeout, refuse=_REFUSAL)
    if token is not None:
        app = RequireBearerToken(app, token)
    limits = limits or serving.ServerLimits()
    await serving.aserve(serving.bounded_config(app, host, port, limits, log_level="warning", lifespan="on"))


def _host_port(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a host and a port; ``ValueError`` if it is not one."""
    host, _, port = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {listen!r} is not HOST:PORT")
    return host, int(port)


def _listening(args: argparse.Namespace) -> tuple[str | None, serving.ServerLimits | None, str | None]:
    """The bearer token the HTTP server requires (``None``: none) and its limits, or the reason it must not
    start."""
    try:
        limits = serving.limits_from_args(args)
        serving.require_bounds(
            **{"--max-body-bytes": args.max_body_bytes, "--body-timeout": args.body_timeout}
        )
        if args.listen is None:
            if args.token_env or args.insecure_open or args.shared_engagement or args.shared_upstream:
                raise ValueError(
                    "--token-env, --insecure-open, --shared-engagement and --shared-upstream apply to --listen only"
                )
            if (limits, args.max_body_bytes, args.body_timeout) != _DEFAULT_LIMITS:
                raise ValueError(
                    "the limits (--header-timeout, --max-body-bytes, ...) apply to --listen only"
                )
            return None, None, None
        host, _ = _host_port(args.listen)
        token = serving.token_from_env(args.token_env)
    except ValueError as exc:
        return None, None, str(exc)
    return (
        token,
        limits,
        serving.exposure_problem(host, token=token, insecure_open=args.insecure_open, what=EXPOSURE),
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentguard-mcp-proxy",
        description="Guard an MCP server's tools with an OpenAgentSpec policy, as a proxy in front of it.",
    )
    parser.add_argument("--spec", required=True, help="the OpenAgentSpec file to enforce")
    parser.add_argument("--listen", metavar="HOST:PORT", help="serve streamable HTTP here instead of stdio")
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="environment variable holding the bearer token every HTTP request must carry "
        "(required to listen beyond loopback)",
    )
    parser.add_argument(
        "--insecure-open",
        action="store_true",
        help="allow listening on a non-loopback address without a token (anyone who can reach it may call "
        "the guarded tools)",
    )
    parser.add_argument(
        "--shared-engagement",
        action="store_true",
        help="over HTTP, one engagement for every client (as on stdio) instead of one per MCP session; lets "
        "clients without a session (the 2026-07-28 protocol) in. Only when the proxy has a single client: "
        "each call is checked against every client's history",
    )
    parser.add_argument("--upstream", metavar="URL", help="guard a remote streamable HTTP server")
    parser.add_argument(
        "--shared-upstream",
        action="store_true",
        help="over HTTP, one upstream connection for every client instead of one per MCP session (only for an "
        "upstream server that keeps no state per session: otherwise a client sees what another did there)",
    )
    parser.add_argument(
        "--max-upstreams",
        type=int,
        default=64,
        metavar="N",
        help="the most upstream connections open at once (one per MCP session; default 64): a session that "
        "would open one more is refused",
    )
    parser.add_argument("--prefix", default="", help="spec name prefix of the server's tools, e.g. 'time.'")
    parser.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="TOOL=CAPABILITY",
        help="the capability a server tool stands for, instead of its name lowercased (repeatable; "
        "chooses among tools whose names map to one capability)",
    )
    parser.add_argument(
        "--relist-interval",
        type=float,
        default=RELIST_INTERVAL,
        metavar="SECONDS",
        help="a call to a tool the upstream's list does not hold makes the proxy read the list again, at most "
        f"once in this many seconds; within them such a call is refused (default {RELIST_INTERVAL:g})",
    )
    parser.add_argument(
        "--max-listing-pages",
        type=int,
        default=MAX_LISTING_PAGES,
        metavar="N",
        help=f"the most tools/list pages read in one listing (default {MAX_LISTING_PAGES}); a tool beyond "
        "them is refused",
    )
    parser.add_argument(
        "--call-timeout",
        type=float,
        default=CALL_TIMEOUT,
        metavar="SECONDS",
        help="how long the upstream has to answer one tools/call, or one tools/list (default "
        f"{CALL_TIMEOUT:g}); a call past it is denied, recorded, and its request cancelled",
    )
    parser.add_argument(
        "--max-result-bytes",
        type=int,
        default=MAX_RESULT_BYTES,
        metavar="N",
        help=f"the largest upstream answer taken, as JSON (default {MAX_RESULT_BYTES}); a larger one is refused",
    )
    parser.add_argument(
        "--max-tools",
        type=int,
        default=MAX_TOOLS,
        metavar="N",
        help=f"the most tools taken from one upstream listing (default {MAX_TOOLS}); a longer one is refused",
    )
    parser.add_argument(
        "--max-tool-bytes",
        type=int,
        default=MAX_TOOL_BYTES,
        metavar="N",
        help=f"the largest entry of one offered tool (description, schemas), as JSON (default {MAX_TOOL_BYTES}); "
        "a listing with a larger one is refused",
    )
    parser.add_argument("--guardian", metavar="URL", help="an AOS guardian asked about every step")
    parser.add_argument(
        "--elicit-reviews",
        action="store_true",
        help="ask the MCP client, through elicitation, to approve the calls the spec puts under require_review "
        "(the proxy has no reviewer of its own: without this, such a spec is refused at start-up)",
    )
    serving.add_limit_options(parser, max_body_bytes=MAX_BODY_BYTES, body_timeout=BODY_TIMEOUT)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the server command and its arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The console script; ``agentguard mcp-proxy`` runs the same function."""
    args = _parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.upstream):
        print("agentguard-mcp-proxy: give either --upstream URL or -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    token, limits, problem = _listening(args)
    names = dict(name.partition("=")[::2] for name in args.name)
    if any(not tool or not capability for tool, capability in names.items()):
        problem = "--name takes TOOL=CAPABILITY"
    if args.max_upstreams < 1:
        problem = "--max-upstreams must be at least 1"
    bounds = {
        "relist_interval": args.relist_interval,
        "max_listing_pages": args.max_listing_pages,
        "call_timeout": args.call_timeout,
        "max_result_bytes": args.max_result_bytes,
        "max_tools": args.max_tools,
        "max_tool_bytes": args.max_tool_bytes,
    }
    try:
        serving.require_bounds(**{"--" + name.replace("_", "-"): value for name, value in bounds.items()})
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        print(f"agentguard-mcp-proxy: {problem}", file=sys.stderr)
        return 2
    options: dict[str, Any] = {}
    if args.guardian:
        from agentguard.guardian import GuardianClient

        options["guardian"] = GuardianClient(args.guardian)
    guard = Guard.from_file(args.spec, **options)
    upstream: Upstream = args.upstream or StdioServerParameters(command=command[0], args=command[1:])
    proxy_options: dict[str, Any] = {
        "prefix": args.prefix,
        "names": names,
        "elicit_reviews": args.elicit_reviews,
        "upstream_per_session": not args.shared_upstream,
        "max_upstreams": args.max_upstreams,
        **bounds,
    }
    if args.shared_engagement:
        proxy_options["engagement_key"] = lambda ctx, user: "shared"
    server = build_proxy(guard, upstream, **proxy_options)
    missing = guard.missing_configuration()
    if missing:  # e.g. a guardrail tool the spec names: a proxy has no Python tools to register
        print("agentguard-mcp-proxy: the spec needs:\n  - " + "\n  - ".join(missing), file=sys.stderr)
        if not args.elicit_reviews and guard.required_reviewers():
            print("  (a reviewer can be the MCP client's user: --elicit-reviews)", file=sys.stderr)
        return 2
    if args.listen is not None and token is None and not serving.is_loopback(_host_port(args.listen)[0]):
        print(
            f"agentguard-mcp-proxy: serving {args.listen} without a token (--insecure-open): anyone who can "
            f"reach it can {EXPOSURE}",
            file=sys.stderr,
        )
    http = {"limits": limits, "max_body_bytes": args.max_body_bytes, "body_timeout": args.body_timeout}
    anyio.run(partial(serve, server, args.listen, token=token, insecure_open=args.insecure_open, **http))
    return 0


if __name__ == "__main__":
    sys.exit(main())
