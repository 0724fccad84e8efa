"""agentguard.serving's ASGI middleware, driven as a server drives it: the token before anything else, and a
request body's total deadline. The servers that use them are tested against real sockets (the MCP proxy's
``test_mcp_proxy_limits.py``, the OpenAgentSpec server's ``test_server_limits.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentguard.serving import BodyDeadline, RequireBearerToken, ServerLimits, json_refusal
from agentguard.serving import _limits as limits

Message = dict[str, Any]
TOKEN = "s3cret"


class App:
    """An ASGI app that records what reached it, reads the whole body, then answers 200."""

    def __init__(self) -> None:
        self.scopes: list[str] = []
        self.received: list[Message] = []
        self.sent_after_disconnect = 0

    async def __call__(self, scope: Any, receive: Callable[[], Awaitable[Message]], send: Any) -> None:
        self.scopes.append(scope["type"])
        if scope["type"] != "http":
            return
        while True:
            message = await receive()
            self.received.append(message)
            if message["type"] == "http.disconnect":
                self.sent_after_disconnect += 1
                break
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _http(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/", "headers": headers}


async def _drive(
    app: Any, scope: dict[str, Any], messages: list[tuple[float, Message]]
) -> tuple[list[Message], float]:
    """Run ``app`` on ``scope``: its reads get ``messages`` (each after its delay), then wait forever as a
    client that sends nothing more. What it sent, and how long it took."""
    sent: list[Message] = []
    queue = list(messages)

    async def receive() -> Message:
        if not queue:
            await asyncio.sleep(3600)
        delay, message = queue.pop(0)
        await asyncio.sleep(delay)
        return message

    async def send(message: Message) -> None:
        sent.append(message)

    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(app(scope, receive, send), 10)
    return sent, loop.time() - started


def _status(sent: list[Message]) -> int:
    return int(next(m["status"] for m in sent if m["type"] == "http.response.start"))


# -- RequireBearerToken ----------------------------------------------------------------------------------------


async def test_only_the_one_right_token_lets_a_request_through() -> None:
    inner = App()
    guarded = RequireBearerToken(inner, TOKEN, realm="test")
    right = (b"authorization", b"Bearer " + TOKEN.encode())
    for headers, status in [
        ([right], 200),
        ([(b"Authorization", b"bearer  " + TOKEN.encode() + b" ")], 200),
        ([], 401),
        ([(b"authorization", b"Bearer wrong")], 401),
        ([(b"authorization", TOKEN.encode())], 401),
        ([(b"authorization", b"Basic " + TOKEN.encode())], 401),
        ([right, right], 401),  # two headers: which one an app behind reads is not ours to guess
        ([right, (b"authorization", b"Bearer wrong")], 401),
    ]:
        sent, _ = await _drive(guarded, _http(headers), [(0, {"type": "http.request", "body": b""})])
        assert _status(sent) == status, headers
        if status == 401:
            challenge = dict(sent[0]["headers"])[b"www-authenticate"]
            assert challenge.startswith(b'Bearer realm="test"')
    assert inner.scopes == ["http", "http"]


async def test_lifespan_passes_a_websocket_without_the_token_is_closed_and_any_other_kind_needs_it() -> None:
    inner = App()
    guarded = RequireBearerToken(inner, TOKEN, realm="test")
    await _drive(guarded, {"type": "lifespan"}, [])
    sent, _ = await _drive(
        guarded, {"type": "websocket", "headers": []}, [(0, {"type": "websocket.connect"})]
    )
    assert sent == [{"type": "websocket.close", "code": 1008}]
    sent, _ = await _drive(guarded, {"type": "webtransport", "headers": []}, [])
    assert _status(sent) == 401
    assert inner.scopes == ["lifespan"]


@pytest.mark.parametrize("token", ["", None, b"s3cret", 123])
def test_a_token_that_is_not_a_non_empty_str_is_refused(token: Any) -> None:
    with pytest.raises(ValueError, match="non-empty str") as refused:
        RequireBearerToken(App(), token, realm="test")
    assert "s3cret" not in str(refused.value)  # the error never quotes the secret


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.binary(max_size=40), max_size=3))
def test_no_header_without_the_token_passes(values: list[bytes]) -> None:
    assume(all(TOKEN.encode() not in value for value in values))
    guarded = RequireBearerToken(App(), TOKEN, realm="test")
    assert guarded.challenge([(b"authorization", value) for value in values]) is not None


async def test_a_refusal_reads_as_the_app_writes_its_errors() -> None:
    refuse = json_refusal(lambda status, message: {"error": {"code": -32001, "message": message}})
    sent, _ = await _drive(RequireBearerToken(App(), TOKEN, realm="x", refuse=refuse), _http([]), [])
    headers = dict(sent[0]["headers"])
    assert (_status(sent), headers[b"content-type"]) == (401, b"application/json")
    assert sent[1]["body"] == b'{"error":{"code":-32001,"message":"Unauthorized"}}'
    assert headers[b"content-length"] == str(len(sent[1]["body"])).encode()


# -- BodyDeadline ---------------------------------------------------------------------------------------------


def _chunk(more: bool = True) -> Message:
    return {"type": "http.request", "body": b"x", "more_body": more}


async def test_a_trickled_body_is_answered_408_at_its_total_deadline() -> None:
    inner = App()
    trickle = [(0.05, _chunk()) for _ in range(100)]  # a byte every 50 ms: never idle, never done
    sent, took = await _drive(BodyDeadline(inner, 0.3), _http([]), trickle)
    assert _status(sent) == 408
    assert (b"connection", b"close") in sent[0]["headers"]
    assert b"0.3 s" in sent[1]["body"]
    assert 0.25 < took < 2.0
    assert inner.received[-1] == {"type": "http.disconnect"}
    assert len(sent) == 2  # the app's own 200, sent after it was told the client left, is dropped


async def test_a_body_in_time_passes_whole_and_what_is_read_after_it_is_not_timed() -> None:
    inner = App()
    body = [(0.05, _chunk()), (0.05, _chunk()), (0.05, _chunk(more=False))]
    sent, _ = await _drive(BodyDeadline(inner, 1.0), _http([]), body)
    assert _status(sent) == 200
    assert [m["body"] for m in inner.received] == [b"x", b"x", b"x"]

    class Streams(App):
        """Reads the body, then waits for the client to leave (as an answer streamed over SSE does)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            self.received.append(await receive())
            await send({"type": "http.response.body", "body": b"done"})

    streams = Streams()
    late_goodbye = [(0, _chunk(more=False)), (0.4, {"type": "http.disconnect"})]
    sent, took = await _drive(BodyDeadline(streams, 0.2), _http([]), late_goodbye)
    assert [_status(sent), sent[-1]["body"]] == [200, b"done"]
    assert took >= 0.4


async def test_an_app_that_answered_before_the_body_timed_out_is_cut_off_without_a_second_answer() -> None:
    class AnswersFirst(App):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            while (await receive())["type"] != "http.disconnect":
                pass
            await send({"type": "http.response.body", "body": b"late"})

    sent, _ = await _drive(
        BodyDeadline(AnswersFirst(), 0.2), _http([]), [(0.05, _chunk()) for _ in range(100)]
    )
    assert sent == [{"type": "http.response.start", "status": 200, "headers": []}]


async def test_other_connections_pass_untimed() -> None:
    inner = App()
    await _drive(BodyDeadline(inner, 0.01), {"type": "lifespan"}, [])
    assert inner.scopes == ["lifespan"]


@pytest.mark.parametrize("seconds", [0, -1, math.nan, math.inf, True])
def test_the_deadline_must_be_positive_and_finite(seconds: float) -> None:
    with pytest.raises(ValueError, match="seconds must be positive and finite"):
        BodyDeadline(App(), seconds)


UNBOUNDED = [0, -1, math.nan, math.inf, True, "10"]
"""Limits that bound nothing: NaN slipped past the servers' ``limit <= 0`` checks, infinity past every one."""


@pytest.mark.parametrize("value", UNBOUNDED)
@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ServerLimits)])
def test_server_limits_refuse_a_limit_that_bounds_nothing(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be positive and finite, not "):
        ServerLimits(**{field: value})


@pytest.mark.parametrize("value", UNBOUNDED)
@pytest.mark.parametrize("option", ["max_body_bytes", "body_timeout", "rule_threads"])
def test_the_guardian_app_refuses_a_limit_that_bounds_nothing(option: str, value: Any) -> None:
    from agentguard.guardian.server import GuardianRules, create_app

    with pytest.raises(ValueError, match=f"^{option} must be positive and finite"):
        create_app(GuardianRules(), **{option: value})


@pytest.mark.parametrize("value", UNBOUNDED)
@pytest.mark.parametrize("option", ["max_body_bytes", "body_timeout", "max_concurrency", "run_timeout"])
def test_the_openagentspec_app_refuses_a_limit_that_bounds_nothing(option: str, value: Any) -> None:
    from agentguard import Guard
    from agentguard.server import create_app
    from tests.server.support import SHOP_SPEC, shop_runner

    with pytest.raises(ValueError, match=f"^{option} must be positive and finite"):
        create_app([Guard.from_yaml(SHOP_SPEC)], shop_runner, **{option: value})


async def test_behind_a_real_server_the_middlewares_compose() -> None:
    """Both around one app in a real uvicorn: the token is checked before the body is waited for."""
    from agentguard.serving import ServerLimits, serve_in_thread

    app = RequireBearerToken(BodyDeadline(App(), 5.0), TOKEN, realm="test")
    with serve_in_thread(app, limits=ServerLimits()) as server:
        async with httpx.AsyncClient(base_url=server.url) as http:
            refused = await http.post("/", content=b"x")
            passed = await http.post("/", content=b"x", headers={"Authorization": f"Bearer {TOKEN}"})
    assert (refused.status_code, passed.status_code, passed.text) == (401, 200, "ok")


def test_limits_doctests() -> None:
    import doctest

    result = doctest.testmod(limits)
    assert (result.attempted > 0, result.failed) == (True, 0)
