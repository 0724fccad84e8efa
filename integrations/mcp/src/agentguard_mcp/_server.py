"""The server side: a ``Server.middleware`` entry that enforces a spec on incoming ``tools/call``.

``Server.middleware`` (provisional in SDK 2.x) is the one hook that sees the raw request before params
validation, so a guardian ``modify`` reaches the handler, and that also sees ``tools/list`` to hide what the
spec does not allow. ``Extension.intercept_tool_call`` cannot rewrite arguments, so it is not used.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from agentguard import Approval, Engagement, Guard, PolicyViolation, Reviewer, ReviewRequest, User
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
)
from agentguard_mcp._host import (
    MODERN_PROTOCOL_VERSIONS,
    CallNext,
    HandlerResult,
    MCPError,
    MCPServer,
    NoBackChannelError,
    Server,
    ServerRequestContext,
    connection_of,
    get_access_token,
)

__all__ = [
    "ANONYMOUS",
    "FULL",
    "NO_SESSION",
    "STOPPED",
    "GuardMiddleware",
    "default_engagement_key",
    "guard_server",
    "session_id",
    "user_from_auth",
]

STOPPED = -32000
"""The JSON-RPC error code of a ``tools/call`` that ended the engagement (loop stop, failed guardrail, an
engagement stopped earlier); ``data`` names the rule."""

NO_SESSION = -32600
"""The JSON-RPC error code (``INVALID_REQUEST``) of a request refused because it has no engagement: no MCP
session, no authenticated user, and over HTTP (see :func:`default_engagement_key`)."""

FULL = -32002
"""The JSON-RPC error code of a request refused because it would open one engagement more than
``max_engagements`` (nothing runs; the refusal is logged)."""

ANONYMOUS = "anonymous"
"""The engagement key of a server's one client on stdio or in process (no session, no user)."""

Request = ServerRequestContext[Any, Any]

_log = logging.getLogger("agentguard_mcp")

_request: contextvars.ContextVar[Request | None] = contextvars.ContextVar(
    "agentguard_mcp_request", default=None
)


def session_id(ctx: Request) -> str | None:
    """The MCP session a request belongs to: the ``Mcp-Session-Id`` the SDK's (stateful) streamable HTTP
    transport gave its connection. ``None`` on stdio and in process, on the stateless 2026-07-28 protocol, on
    ``stateless_http`` servers and on the SSE transport (whose connections carry no session id)."""
    connection = connection_of(ctx)
    return connection.session_id if connection is not None else None


def default_engagement_key(ctx: Request, user: User | None) -> str | None:
    """Which engagement a request belongs to, or ``None``: refused.

    - an MCP session: ``"session:<id>"``, or ``"user:<id>/session:<id>"`` with an authenticated user. An
      engagement is one conversation; a session is the client's conversation, so another session's calls
      (the same user's, or those of everyone sharing one credential) never satisfy this one's checks. The
      engagement is closed when the session ends.
    - no session, an authenticated user: ``"user:<id>"`` (the stateless protocol's only continuity: the
      user's requests, never a stranger's, share it, so the loop detector still sees a loop).
    - no session, no user, and no HTTP request (stdio, in process): ``"anonymous"``, the server's one client.
    - no session, no user, over HTTP (the 2026-07-28 protocol, ``stateless_http``, SSE): ``None``. One
      engagement for every caller would check each against the others' history, one per request would never
      see a loop; the server is told to authenticate users, or give its own ``engagement_key``.
    """
    session = session_id(ctx)
    if session is not None:
        return f"session:{session}" if user is None else f"user:{user.id}/session:{session}"
    if user is not None:
        return f"user:{user.id}"
    if ctx.request is None:
        return ANONYMOUS
    return None


_NO_ENGAGEMENT = (
    "agentguard: this request has no MCP session (the stateless 2026-07-28 protocol, or a stateless HTTP "
    "server) and no authenticated user, so it has no engagement of its own; sharing one with every other "
    "client would check it against their calls. Connect with the 2025 session protocol, authenticate users, "
    "or give the server an engagement_key (agentguard-mcp-proxy: --shared-engagement, for one client)."
)


def user_from_auth(ctx: Request) -> User | None:
    """The engagement's user from the request's OAuth access token (``sub``, else the client id), if any."""
    token = get_access_token()
    if token is None:
        return None
    claims = token.claims or {}
    email = claims.get("email")
    return User(
        id=token.subject or token.client_id,
        email=email if isinstance(email, str) else None,
        metadata={"client_id": token.client_id, "scopes": list(token.scopes)},
    )


class GuardMiddleware:
    """Enforces ``guard``'s spec on every ``tools/call`` a server receives, and filters ``tools/list``.

    ::

        server = MCPServer("shop", middleware=[GuardMiddleware(guard)])   # or guard_server(server, guard)

    A denial the model can recover from is a tool result with ``isError: true`` naming the rule; a loop stop or
    failed guardrail is a JSON-RPC error (:data:`STOPPED`). Engagements are kept per ``engagement_key`` (default
    :func:`default_engagement_key`: one per MCP session, closed and forgotten when the session ends; per user
    without a session; the one client on stdio; a request over HTTP with neither session nor user is refused,
    :data:`NO_SESSION`). A key of your own may return ``None`` to refuse too. At most ``max_engagements`` are
    kept: a request that would open one more is refused (:data:`FULL`, logged) rather than an open one closed
    early, since a closed engagement's successor starts with an empty history, and a limit such as
    ``size(history.x) < 5`` would start over (``None``: no bound). For the same reason an engagement no session
    ends (a user's, a key of your own) lives as long as the server unless you give ``idle_timeout``: then it is
    closed and forgotten once no request has used it for that many seconds. ``user`` reads the user from the
    request (default :func:`user_from_auth`). Reviews are asked of the reviewer registered on the guard. With
    ``elicit_reviews=True``, one the guard has none for is asked of the client through MCP elicitation when it can
    answer, and is rejected otherwise. Off by default: the client is the one asking for the call, and a
    ``require_review`` names a reviewer other than the caller (an agent host that accepts every elicitation would
    approve its own calls); turn it on when the client's user is the reviewer the spec means. Without it, an
    engagement does not start while a reviewer is missing (:meth:`agentguard.Guard.missing_configuration`).
    A call to a tool the server's list does not hold makes the guard read the list again (at most
    ``max_listing_pages`` pages), at most once every ``relist_interval`` seconds (:class:`Catalog`). What the
    handlers below answer is bounded as a remote server's is (``call_timeout``, ``max_result_bytes``,
    ``max_tools``, ``max_tool_bytes``; see :class:`Catalog`): behind the proxy they are the upstream server's
    answers.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        prefix: str = "",
        names: Mapping[str, str] | None = None,
        user: Callable[[Request], User | None] = user_from_auth,
        engagement_key: Callable[[Request, User | None], str | None] | None = None,
        elicit_reviews: bool = False,
        max_engagements: int | None = 10_000,
        idle_timeout: float | None = None,
        relist_interval: float = RELIST_INTERVAL,
        max_listing_pages: int = MAX_LISTING_PAGES,
        call_timeout: float = CALL_TIMEOUT,
        max_result_bytes: int = MAX_RESULT_BYTES,
        max_tools: int = MAX_TOOLS,
        max_tool_bytes: int = MAX_TOOL_BYTES,
    ) -> None:
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
        self._user = user
        self._key = engagement_key or default_engagement_key
        self._by_session = engagement_key is None  # the default key: a session's engagement ends with it
        self.engagements: dict[str, Engagement] = {}
        self.max_engagements = max_engagements
        self.idle_timeout = idle_timeout
        self._used: dict[str, float] = {}  # engagements no session ends: key -> when a request last used it
        if elicit_reviews:
            for reviewer_id in guard.required_reviewers():
                reviewer, config = guard.reviewer_for(reviewer_id)
                if reviewer is None:  # the guard's own reviewer answers: the client must not approve itself
                    guard.add_reviewer(reviewer_id, _eliciting(reviewer_id), config=config)

    def engagement_for(self, ctx: Request) -> Engagement:
        """The engagement a request belongs to, opened on first use with the request's user; ``MCPError``
        (:data:`NO_SESSION`) when the key says the request has none."""
        user = self._user(ctx)
        key = self._key(ctx, user)
        if key is None:
            raise MCPError(NO_SESSION, _NO_ENGAGEMENT)
        eng = self.engagements.get(key)
        if eng is None:
            if self.max_engagements is not None and len(self.engagements) >= self.max_engagements:
                _log.warning("refused a request for a new engagement: %d are open", len(self.engagements))
                raise MCPError(
                    FULL,
                    f"agentguard: {len(self.engagements)} engagements are open, the most this server keeps "
                    "(max_engagements); try again when one has ended",
                )
            eng = self.engagements[key] = self.guard.engagement(user=user)
            connection = connection_of(ctx) if self._by_session else None
            if connection is not None and connection.session_id is not None:
                # the SDK closes a session on DELETE, idle timeout (30 min by default) or shutdown, and caps
                # how many are open (10 000 by default): so are the engagements kept for sessions
                connection.exit_stack.push_async_callback(self._session_ended, key, eng)
                return eng
        elif key not in self._used:  # a session's: it ends with the session
            return eng
        self._used.pop(key, None)  # most recently used last: the idle ones are first
        self._used[key] = time.monotonic()
        return eng

    async def _close_idle(self, idle: float) -> None:
        """Close and forget the engagements no session ends that no request used for ``idle`` seconds (one
        with a call still running is kept, as used now)."""
        now = time.monotonic()
        for key, used in list(self._used.items()):
            if now - used <= idle:
                break
            del self._used[key]
            eng = self.engagements.get(key)
            if eng is not None and eng.state.in_flight:
                self._used[key] = now
            elif eng is not None:
                del self.engagements[key]
                await eng.aclose()

    async def _session_ended(self, key: str, eng: Engagement) -> None:
        """Forget and close a session's engagement: its calls are over, and nothing can reach it again."""
        if self.engagements.get(key) is eng:
            del self.engagements[key]
        await eng.aclose()

    async def __call__(self, ctx: Request, call_next: CallNext) -> HandlerResult:
        if ctx.method not in ("tools/call", "tools/list") or ctx.request_id is None:
            return await call_next(ctx)
        params = dict(ctx.params or {})
        if self.idle_timeout is not None:
            await self._close_idle(self.idle_timeout)
        token = _request.set(ctx)
        try:
            with self.engagement_for(ctx).activate():
                if ctx.method == "tools/list":
                    return await self._list(ctx, params, call_next)
                return await self._call(ctx, params, call_next)
        except PolicyViolation as exc:
            raise MCPError(STOPPED, str(exc), {"rule": exc.rule.value, "capability": exc.capability}) from exc
        finally:
            _request.reset(token)

    async def _list(self, ctx: Request, params: Wire, call_next: CallNext) -> HandlerResult:
        async def fetch() -> Wire:
            return _as_wire(await call_next(ctx))

        request = {"jsonrpc": "2.0", "id": ctx.request_id, "method": "tools/list", "params": params}
        return await guarded_listing(
            self.guard, self.catalog, request, fetch, first=params.get("cursor") is None
        )

    async def _call(self, ctx: Request, params: Wire, call_next: CallNext) -> HandlerResult:
        async def send(inputs: dict[str, Any]) -> Wire:
            return _as_wire(await call_next(dataclasses.replace(ctx, params={**params, "arguments": inputs})))

        async def list_page(cursor: str | None) -> Wire:
            """A page of the server's own tool list, from the handler chain below (not reported: the guard's
            own look-up, not a step of the agent's)."""
            page = {key: params[key] for key in ("_meta",) if key in params}  # the protocol's, on 2026-07-28
            if cursor is not None:
                page["cursor"] = cursor
            return _as_wire(await call_next(dataclasses.replace(ctx, method="tools/list", params=page)))

        tool = str(params.get("name", ""))
        arguments = params.get("arguments") or {}
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        assert ctx.request_id is not None  # notifications were passed on above
        return await guarded_call(
            self.guard,
            self.catalog,
            tool,
            arguments,
            send,
            ctx.request_id,
            list_page=list_page,
            modern=modern,
        )


def _as_wire(result: HandlerResult) -> Wire:
    """``call_next`` returns the serialized wire dict; a model (from a short-circuiting middleware) is dumped."""
    if isinstance(result, dict):
        return result
    return {} if result is None else result.model_dump(by_alias=True, mode="json", exclude_none=True)


def guard_server(server: Server[Any] | MCPServer, guard: Guard, **options: Any) -> GuardMiddleware:
    """Add a :class:`GuardMiddleware` to a low-level ``Server`` or an ``MCPServer``, once (idempotent)."""
    chain = server.middleware
    for existing in chain:
        if isinstance(existing, GuardMiddleware) and existing.guard is guard:
            return existing
    middleware = GuardMiddleware(guard, **options)
    chain.append(middleware)
    return middleware


# -- reviews through MCP elicitation ------------------------------------------------------------------

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve", "description": "Allow this tool call?"},
        "reason": {"type": "string", "title": "Reason"},
    },
    "required": ["approve"],
}


def _eliciting(reviewer_id: str) -> Reviewer:
    """A reviewer, for a reviewer id the guard has none for, that asks the MCP client through elicitation.

    Only then: the client is the one asking for the call, so its answer never stands in for a reviewer the
    guard has. The client can answer when it declared the elicitation capability and the connection has a
    back-channel (the 2025 handshake protocol; the stateless 2026-07-28 protocol has none, see the README).
    Declining or cancelling rejects; no client that can answer: rejected, as in the core.
    """

    async def review(request: ReviewRequest) -> Approval:
        ctx = _request.get()
        capabilities = ctx.session.client_capabilities if ctx is not None else None
        if ctx is not None and capabilities is not None and capabilities.elicitation is not None:
            what = "its result" if request.outputs is not None else "this call"
            message = (
                f"{request.message}\nReviewer {reviewer_id!r}: approve {what} of {request.capability!r}?"
            )
            try:
                answer = await ctx.session.elicit_form(message, _SCHEMA, related_request_id=ctx.request_id)
            except NoBackChannelError:
                pass
            else:
                content = answer.content or {}
                approved = answer.action == "accept" and content.get("approve") is True
                reason = (
                    content.get("reason") if answer.action == "accept" else f"elicitation {answer.action}"
                )
                return Approval(approved, str(reason) if reason else None, f"{reviewer_id} (MCP elicitation)")
        return Approval(False, f"no reviewer {reviewer_id!r} and the MCP client cannot elicit", reviewer_id)

    return review
