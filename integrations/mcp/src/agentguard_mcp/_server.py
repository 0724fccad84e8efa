"""The server side: a ``Server.middleware`` entry that enforces a spec on incoming ``tools/call``.

``Server.middleware`` (provisional in SDK 2.x) is the one hook that sees the raw request before params
validation, so a guardian ``modify`` reaches the handler, and that also sees ``tools/list`` to hide what the
spec does not allow. ``Extension.intercept_tool_call`` cannot rewrite arguments, so it is not used.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from agentguard import Approval, Engagement, Guard, PolicyViolation, Reviewer, ReviewRequest, User
from agentguard_mcp._calls import Names, Wire, guarded_call, report_message
from agentguard_mcp._host import (
    MODERN_PROTOCOL_VERSIONS,
    CallNext,
    HandlerResult,
    MCPError,
    MCPServer,
    NoBackChannelError,
    Server,
    ServerRequestContext,
    get_access_token,
)

__all__ = ["STOPPED", "GuardMiddleware", "guard_server", "user_from_auth"]

STOPPED = -32000
"""The JSON-RPC error code of a ``tools/call`` that ended the engagement (loop stop, failed guardrail, an
engagement stopped earlier); ``data`` names the rule."""

Request = ServerRequestContext[Any, Any]

_request: contextvars.ContextVar[Request | None] = contextvars.ContextVar(
    "agentguard_mcp_request", default=None
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

    A denial the model can recover from is a tool result with ``isError: true`` naming the rule; a loop stop
    or failed guardrail is a JSON-RPC error (:data:`STOPPED`). Engagements are kept per ``engagement_key``
    (default: the authenticated user, else one shared engagement for the server, which is one client on
    stdio); ``user`` reads the user from the request (default :func:`user_from_auth`). Reviews are asked of
    the reviewer registered on the guard. With ``elicit_reviews=True``, one the guard has none for is asked of
    the client through MCP elicitation when it can answer, and is rejected otherwise. Off by default: the
    client is the one asking for the call, and a ``require_review`` names a reviewer other than the caller (an
    agent host that accepts every elicitation would approve its own calls); turn it on when the client's user
    is the reviewer the spec means. Without it, an engagement does not start while a reviewer is missing
    (:meth:`agentguard.Guard.missing_configuration`).
    """

    def __init__(
        self,
        guard: Guard,
        *,
        prefix: str = "",
        names: Mapping[str, str] | None = None,
        user: Callable[[Request], User | None] = user_from_auth,
        engagement_key: Callable[[Request, User | None], str] | None = None,
        elicit_reviews: bool = False,
    ) -> None:
        self.guard = guard
        self.names = Names(prefix, dict(names or {}))
        self._user = user
        self._key = engagement_key or (lambda ctx, user: f"user:{user.id}" if user else "anonymous")
        self.engagements: dict[str, Engagement] = {}
        if elicit_reviews:
            for reviewer_id in guard.required_reviewers():
                reviewer, config = guard.reviewer_for(reviewer_id)
                if reviewer is None:  # the guard's own reviewer answers: the client must not approve itself
                    guard.add_reviewer(reviewer_id, _eliciting(reviewer_id), config=config)

    def engagement_for(self, ctx: Request) -> Engagement:
        """The engagement a request belongs to, opened on first use with the request's user."""
        user = self._user(ctx)
        key = self._key(ctx, user)
        eng = self.engagements.get(key)
        if eng is None:
            eng = self.engagements[key] = self.guard.engagement(user=user)
        return eng

    async def __call__(self, ctx: Request, call_next: CallNext) -> HandlerResult:
        if ctx.method not in ("tools/call", "tools/list") or ctx.request_id is None:
            return await call_next(ctx)
        params = dict(ctx.params or {})
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
        request = {"jsonrpc": "2.0", "id": ctx.request_id, "method": "tools/list", "params": params}
        await report_message(self.guard, request)
        result = _as_wire(await call_next(ctx))
        await report_message(self.guard, {"jsonrpc": "2.0", "id": ctx.request_id, "result": result})
        tools = [t for t in result.get("tools", []) if self.names.offered(self.guard, str(t.get("name")))]
        return {**result, "tools": tools}

    async def _call(self, ctx: Request, params: Wire, call_next: CallNext) -> HandlerResult:
        async def send(inputs: dict[str, Any]) -> Wire:
            return _as_wire(await call_next(dataclasses.replace(ctx, params={**params, "arguments": inputs})))

        tool = str(params.get("name", ""))
        arguments = params.get("arguments") or {}
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        assert ctx.request_id is not None  # notifications were passed on above
        return await guarded_call(
            self.guard, self.names, tool, arguments, send, ctx.request_id, modern=modern
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
