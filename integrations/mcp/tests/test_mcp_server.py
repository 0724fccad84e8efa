"""The server side: ``GuardMiddleware`` on the shop's ``MCPServer``, driven by the SDK's client in process."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from agentguard_mcp import FULL, STOPPED, GuardMiddleware, guard_server
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import INVALID_REQUEST, ElicitResult

from agentguard import Outcome, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer

from .conftest import eventually, free_port, make_guard, serving
from .shop_server import make_server


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


async def test_a_denied_call_is_an_error_result_naming_the_rule_and_never_runs() -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    middleware = guard_server(server, make_guard())
    async with Client(server) as client:
        listed = await client.list_tools()
        refused = await client.call_tool("send_email", {"to": "eve@evil.test", "body": "hi"})
        unknown = await client.call_tool("delete_everything", {})
        found = await client.call_tool("lookup_order", {"order_id": "A-1"})
    assert "delete_everything" not in {t.name for t in listed.tools}
    assert refused.is_error
    assert "[restriction input] send-email" in _text(refused)
    assert unknown.is_error
    assert "[capability" in _text(unknown)
    assert found.structured_content == {"order_id": "A-1", "status": "shipped"}
    assert ran == [("lookup_order", {"order_id": "A-1"})]
    eng = middleware.engagements["anonymous"]
    assert eng.state.names == ["lookup-order"]
    assert [s.kind for s in eng.steps].count("protocols/MCP") == 4  # tools/list and one call that ran


async def test_a_loop_stop_is_a_json_rpc_error_naming_the_rule() -> None:
    server = make_server([])
    guard_server(server, make_guard())
    async with Client(server) as client:
        for _ in range(2):
            await client.call_tool("lookup_order", {"order_id": "A-1"})
        with pytest.raises(MCPError) as stopped:
            await client.call_tool("lookup_order", {"order_id": "A-1"})
    assert stopped.value.code == STOPPED
    assert stopped.value.data["rule"] == "short-circuit"


async def test_the_user_comes_from_the_requests_auth_context() -> None:
    server = make_server([])
    middleware = guard_server(server, make_guard())
    token = AccessToken(
        token="t", client_id="desk-app", scopes=["shop"], subject="u-42", claims={"email": "ann@corp.com"}
    )
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        async with Client(server) as client:
            await client.call_tool("lookup_order", {"order_id": "A-1"})
    finally:
        auth_context_var.reset(reset)
    eng = middleware.engagements["user:u-42"]
    assert eng.user == User(
        id="u-42", email="ann@corp.com", metadata={"client_id": "desk-app", "scopes": ["shop"]}
    )


def test_installing_twice_adds_one_middleware() -> None:
    server = make_server([])
    guard = make_guard()
    assert guard_server(server, guard) is guard_server(server, guard)
    assert sum(isinstance(m, GuardMiddleware) for m in server.middleware) == 1


@pytest.mark.parametrize(("answer", "approved"), [({"approve": True}, True), ({"approve": False}, False)])
async def test_review_through_mcp_elicitation(answer: dict[str, Any], approved: bool) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    guard = make_guard(reviewers={})  # no reviewer of its own: the client's user answers
    middleware = guard_server(server, guard, elicit_reviews=True)
    asked: list[str] = []

    async def elicit(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content=answer)

    # the 2025 handshake protocol: the server can send the client an elicitation request mid-call
    async with Client(server, mode="legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("refund", {"order_id": "A-1", "amount": 30})
    assert len(asked) == 1
    assert "approve this call of 'refund'" in asked[0]
    assert result.is_error is not approved
    assert bool(ran) is approved
    review = next(
        d for s in middleware.engagements["anonymous"].steps for d in s.decisions if d.rule == "review"
    )
    assert review.outcome is (Outcome.REVIEW_APPROVED if approved else Outcome.REVIEW_REJECTED)


async def test_a_clients_elicitation_does_not_stand_in_for_the_guards_reviewer() -> None:
    """The client asks for the call: its own answer to an elicitation must not approve it over the reviewer
    the guard has for the spec's ``require_review``."""
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    guard_server(server, make_guard(reviewers={"supervisor": lambda request: False}))
    asked: list[str] = []

    async def elicit(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    async with Client(server, mode="legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("refund", {"order_id": "A-1", "amount": 30})
    assert result.is_error
    assert "[review input] refund" in _text(result)
    assert asked == []
    assert ran == []


async def test_the_client_is_not_asked_to_review_unless_the_server_says_so() -> None:
    """By default a reviewer the guard lacks is a setup mistake, not a question for the client asking for the
    call (an agent host that accepts every elicitation would approve its own calls): nothing runs."""
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    guard_server(server, make_guard(reviewers={}))
    asked: list[str] = []

    async def elicit(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    async with Client(server, mode="legacy", elicitation_callback=elicit) as client:
        with pytest.raises(MCPError, match="reviewer 'supervisor'"):
            await client.call_tool("refund", {"order_id": "A-1", "amount": 30})
    assert asked == []
    assert ran == []


async def test_without_elicitation_the_guards_reviewer_answers() -> None:
    server = make_server([])
    guard_server(server, make_guard(reviewers={"supervisor": lambda request: False}))
    async with Client(server) as client:  # the stateless protocol: no back-channel for elicitation
        result = await client.call_tool("refund", {"order_id": "A-1", "amount": 30})
    assert result.is_error
    assert "[review input] refund" in _text(result)


async def test_guardian_deny_and_modify_on_the_server(guardian: RunningServer) -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    guard_server(server, make_guard(guardian=GuardianClient(guardian.url)))
    async with Client(server) as client:
        denied = await client.call_tool("lookup_order", {"order_id": "X-9"})
        sent = await client.call_tool("send_email", {"to": "bob@corp.com", "body": "secret plans"})
    assert denied.is_error
    assert "Orders of another tenant" in _text(denied)
    assert not sent.is_error
    assert ran == [("send_email", {"to": "bob@corp.com", "body": "[redacted]"})]


# -- engagements over streamable HTTP: one per MCP session ---------------------------------------------


async def test_each_http_session_has_its_own_engagement_closed_with_the_session() -> None:
    """Two anonymous clients of one server over HTTP: each MCP session is an engagement (a loop in one is
    stopped there, the other goes on), and the engagement is closed and forgotten when its session ends."""
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    middleware = guard_server(server, make_guard())
    with serving(server.streamable_http_app()) as url:
        async with Client(url, mode="legacy") as a, Client(url, mode="legacy") as b:
            for _ in range(2):
                await a.call_tool("lookup_order", {"order_id": "A-1"})
            await b.call_tool("lookup_order", {"order_id": "A-1"})  # B's first: not A's third
            with pytest.raises(MCPError, match="short-circuit"):
                await a.call_tool("lookup_order", {"order_id": "A-1"})
            found = await b.call_tool("lookup_order", {"order_id": "A-1"})
            engagements = dict(middleware.engagements)
        assert eventually(lambda: not middleware.engagements)  # both sessions ended (DELETE): forgotten
    assert not found.is_error
    assert sorted(k.split(":")[0] for k in engagements) == ["session", "session"]
    assert sorted(len(e.state.names) for e in engagements.values()) == [2, 2]
    assert sorted(e.status for e in engagements.values()) == ["closed", "stopped"]  # B's closed with it
    assert len(ran) == 4


async def test_an_anonymous_http_request_without_a_session_is_refused() -> None:
    """The 2026-07-28 protocol has no session: over HTTP without a user, one engagement for every stranger
    would fail open, one per request would defeat the loop detector. Refused, and nothing runs."""
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    middleware = guard_server(server, make_guard())
    with serving(server.streamable_http_app()) as url:
        async with Client(url) as client:  # auto: the stateless protocol
            with pytest.raises(MCPError, match="no MCP session") as refused:
                await client.call_tool("lookup_order", {"order_id": "A-1"})
    assert refused.value.code == INVALID_REQUEST
    assert ran == []
    assert middleware.engagements == {}


async def test_an_operator_key_lets_stateless_requests_in() -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    middleware = guard_server(server, make_guard(), engagement_key=lambda ctx, user: "the-one-agent")
    with serving(server.streamable_http_app()) as url:
        async with Client(url) as client:
            for _ in range(2):
                await client.call_tool("lookup_order", {"order_id": "A-1"})
            with pytest.raises(MCPError, match="short-circuit"):
                await client.call_tool("lookup_order", {"order_id": "A-1"})
    assert list(middleware.engagements) == ["the-one-agent"]
    assert len(ran) == 2


def _key_per_order(ctx: Any, user: Any) -> str:
    """An operator key that gives every order its own engagement (and the client's tool listings one)."""
    return str(((ctx.params or {}).get("arguments") or {}).get("order_id", "listings"))


async def test_a_request_that_would_open_one_engagement_too_many_is_refused() -> None:
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran)
    middleware = guard_server(server, make_guard(), engagement_key=_key_per_order, max_engagements=3)
    async with Client(server) as client:
        await client.call_tool("lookup_order", {"order_id": "A-1"})
        await client.call_tool("lookup_order", {"order_id": "A-2"})
        full = dict(middleware.engagements)
        with pytest.raises(MCPError, match="3 engagements are open") as refused:
            await client.call_tool("lookup_order", {"order_id": "A-3"})
        again = await client.call_tool("lookup_order", {"order_id": "A-1"})  # an open one goes on
    assert refused.value.code == FULL
    assert [order for _, order in ran] == [{"order_id": "A-1"}, {"order_id": "A-2"}, {"order_id": "A-1"}]
    assert not again.is_error
    assert middleware.engagements == full  # none was closed to make room
    assert sorted(full) == ["A-1", "A-2", "listings"]
    assert all(e.status == "active" for e in full.values())


@pytest.mark.parametrize("idle_timeout", [None, 0.05])
async def test_engagements_no_session_ends_are_closed_when_idle_only_if_asked(
    idle_timeout: float | None,
) -> None:
    server = make_server([])
    middleware = guard_server(server, make_guard(), engagement_key=_key_per_order, idle_timeout=idle_timeout)
    async with Client(server) as client:
        await client.call_tool("lookup_order", {"order_id": "A-1"})
        first = middleware.engagements["A-1"]
        await anyio.sleep(0.1)
        await client.call_tool("lookup_order", {"order_id": "A-2"})  # a request comes: idle ones are closed
    assert ("A-1" in middleware.engagements) is (idle_timeout is None)
    assert first.status == ("active" if idle_timeout is None else "closed")
    assert "A-2" in middleware.engagements


class _Tokens:
    """A token verifier: two bearer tokens of the one user u-42."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token not in ("laptop", "phone"):
            return None
        return AccessToken(token=token, client_id=f"{token}-app", scopes=[], subject="u-42")


def _auth(url: str) -> AuthSettings:
    return AuthSettings(
        issuer_url="https://auth.example",  # type: ignore[arg-type]
        resource_server_url=url,  # type: ignore[arg-type]
        validate_token_resource=False,  # _Tokens is the whole authorization server here
    )


def _as(url: str, token: str) -> Any:
    return streamable_http_client(
        url, http_client=create_mcp_http_client({"Authorization": f"Bearer {token}"})
    )


async def test_an_authenticated_users_sessions_are_separate_engagements() -> None:
    """With a user, the engagement is still the session's (one conversation), recorded under that user: a
    credential many people share (an agent platform's client) does not put their conversations together."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    auth = _auth(url)
    ran: list[tuple[str, dict[str, Any]]] = []
    server = make_server(ran, auth=auth, token_verifier=_Tokens())
    middleware = guard_server(server, make_guard())
    with serving(server.streamable_http_app(), port):
        async with (
            Client(_as(url, "laptop"), mode="legacy") as a,
            Client(_as(url, "phone"), mode="legacy") as b,
        ):
            for _ in range(2):
                await a.call_tool("lookup_order", {"order_id": "A-1"})
            await b.call_tool("lookup_order", {"order_id": "A-1"})
            with pytest.raises(MCPError, match="short-circuit"):
                await a.call_tool("lookup_order", {"order_id": "A-1"})
            engagements = dict(middleware.engagements)
        assert eventually(lambda: not middleware.engagements)
    assert len(engagements) == 2
    assert all(key.startswith("user:u-42/session:") for key in engagements)
    assert {e.user.id for e in engagements.values() if e.user} == {"u-42"}


async def test_an_authenticated_user_without_a_session_keeps_one_engagement() -> None:
    """The stateless protocol has no session: the user's requests share the user's engagement (never a
    stranger's), so the loop detector still works across them."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    auth = _auth(url)
    server = make_server([], auth=auth, token_verifier=_Tokens())
    middleware = guard_server(server, make_guard())
    with serving(server.streamable_http_app(), port):
        async with Client(_as(url, "laptop")) as client:
            for _ in range(2):
                await client.call_tool("lookup_order", {"order_id": "A-1"})
            with pytest.raises(MCPError, match="short-circuit"):
                await client.call_tool("lookup_order", {"order_id": "A-1"})
    assert list(middleware.engagements) == ["user:u-42"]
