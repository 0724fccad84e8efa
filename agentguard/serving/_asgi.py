"""ASGI middleware for an app served beside agentguard's own servers that does not check these itself: the
bearer token (:class:`RequireBearerToken`) and a request body's total deadline (:class:`BodyDeadline`).

Both are plain ASGI (no framework), and both fail closed: a connection of a kind they do not know needs the
token too, and a body that has not all arrived by its deadline ends the request, whatever the app was doing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from agentguard._httputil import bearer_challenge

from ._limits import require_bounds

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyDeadline", "Refusal", "RequireBearerToken", "json_refusal", "plain_refusal"]

Refusal = Callable[[int, str, list[tuple[bytes, bytes]]], "ASGIApp"]
"""``(status, message, headers) -> the ASGI app that answers``: how an app's errors look (plain JSON, a
JSON-RPC error), so that a refusal by the middleware reads like one by the app behind it."""


def plain_refusal(status: int, message: str, headers: list[tuple[bytes, bytes]]) -> ASGIApp:
    """The default :data:`Refusal`: ``message`` as ``text/plain``, with ``headers``."""
    return _Answer(status, "text/plain; charset=utf-8", message.encode(), headers)


class _Answer:
    """A complete response, as an ASGI app (no framework needed for a fixed body)."""

    def __init__(self, status: int, media_type: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        self.headers = [
            (b"content-type", media_type.encode()),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ]
        self.body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def json_refusal(payload: Callable[[int, str], Any]) -> Refusal:
    """A :data:`Refusal` whose body is ``payload(status, message)`` as JSON."""

    def refuse(status: int, message: str, headers: list[tuple[bytes, bytes]]) -> ASGIApp:
        body = json.dumps(payload(status, message), separators=(",", ":")).encode()
        return _Answer(status, "application/json", body, headers)

    return refuse


class RequireBearerToken:
    """Every request must carry ``Authorization: Bearer <token>``, or it is answered ``401`` with a
    ``WWW-Authenticate: Bearer`` challenge before ``app`` sees it.

    The token is compared in constant time (:func:`~agentguard._httputil.bearer_challenge`, as agentguard's
    own servers compare it). A request with two ``Authorization`` headers is refused: which one an app
    behind would read is the app's business. Lifespan events pass; a WebSocket without the token is closed
    (1008) at its handshake; any other kind of connection needs the token as a request does.
    """

    def __init__(self, app: ASGIApp, token: str, *, realm: str, refuse: Refusal = plain_refusal) -> None:
        if type(token) is not str or not token:
            kind = "an empty str" if token == "" else type(token).__name__  # never the token itself: a secret
            raise ValueError(f"the bearer token must be a non-empty str, not {kind}")
        self.app = app
        self.realm = realm
        self.refuse = refuse
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        challenge = self.challenge(scope.get("headers") or [])
        if challenge is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
        else:
            refusal = self.refuse(401, "Unauthorized", [(b"www-authenticate", challenge.encode())])
            await refusal(scope, receive, send)

    def challenge(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """``None`` when the one ``Authorization`` header carries the token; else the ``WWW-Authenticate``."""
        values = [value for name, value in headers if name.lower() == b"authorization"]
        authorization = values[0].decode("latin-1") if len(values) == 1 else ""
        return bearer_challenge(authorization, self._token, realm=self.realm)


class BodyDeadline:
    """A request's whole body must arrive within ``seconds`` of the app's first read of it, or the request
    is answered ``408`` (with ``Connection: close``) and the app is told the client left.

    A total, not an idle timeout: a client that trickles a byte at a time does not extend it. What the app
    reads after the body (the wait for a disconnect while it streams an answer) is not timed. The app's own
    answer, once the middleware has answered, is dropped: the client has its ``408``.
    """

    def __init__(self, app: ASGIApp, seconds: float, *, refuse: Refusal = plain_refusal) -> None:
        require_bounds(seconds=seconds)
        self.app = app
        self.seconds = seconds
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline: float | None = None
        body_done = started = timed_out = False

        async def timed_receive() -> Message:
            nonlocal deadline, body_done, timed_out
            if timed_out:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()
            if deadline is None:
                deadline = anyio.current_time() + self.seconds
            with anyio.move_on_after(deadline - anyio.current_time()):
                message = await receive()
                body_done = message["type"] != "http.request" or not message.get("more_body", False)
                return message
            timed_out = True
            if not started:
                why = f"Request body not received within {self.seconds:g} s"
                await self.refuse(408, why, [(b"connection", b"close")])(scope, receive, send)
            return {"type": "http.disconnect"}

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if not timed_out:
                started = True
                await send(message)

        await self.app(scope, timed_receive, guarded_send)
