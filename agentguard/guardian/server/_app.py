"""The reference guardian as an ASGI application: AOS JSON-RPC over HTTP POST.

A plain ASGI callable (no framework routing or middleware: each layer costs every request) that refuses,
before reading a request's JSON, what is not for it -- each refusal an HTTP status with a JSON-RPC error
body (``id: null``, codes from the server range of §6.1) so that any client can read why. The checks run
in this order, the token first, so that nothing (not even "no such path") answers an unauthenticated
client differently::

    401  -32001  no or wrong bearer token, when the app has one (``WWW-Authenticate: Bearer ...``)
    404  -32005  not ``/`` or ``/aos``
    405  -32004  not POST (``Allow: POST``)
    415  -32003  Content-Type is not application/json (a charset other than UTF-8 included), or the body
                 has a content coding (gzip, ...): never inflated, nor read as if it were not compressed
    413  -32002  the body is larger than ``max_body_bytes`` (declared or as it streams in)
    408  -32006  the whole body did not arrive within ``body_timeout`` seconds (the connection is closed)

A 415 names the content codings it refused as an excerpt (:func:`agentguard._httputil.excerpt`): the header is as long
as the head allows.

Everything else is JSON-RPC, answered with HTTP 200 (or 204 when there is nothing to answer), including
internal errors: a guardian never answers a 500 with a traceback. The request is decided on a bounded pool
of ``rule_threads`` worker threads (:mod:`._pool`; the caller's context copied), never on the event loop,
so a request with a costly rule condition does not stall the others (a ``ping`` included).

Each request is an OpenTelemetry SERVER span ``aos {method}`` (``opentelemetry-api`` only: the host's SDK,
if any, records it) whose parent is read from the request's W3C ``traceparent``: an agentguard client sends
it, so the guardian's work shows up inside the agent's trace, below the step it decided.
"""

from __future__ import annotations

import asyncio
import enum
import logging

try:
    from starlette.datastructures import Headers
    from starlette.types import Message, Receive, Scope, Send
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the reference guardian needs Starlette and uvicorn: pip install 'agentguard[server]'"
    ) from exc

from opentelemetry.trace import TracerProvider

from agentguard import __version__
from agentguard._httputil import (
    bearer_challenge,
    content_codings,
    declared_too_large,
    excerpt,
    is_json_media_type,
)
from agentguard.aos import ErrorCode
from agentguard.guardian._tracing import ServerSpan, ServerTracing
from agentguard.serving import require_bounds

from ._deadlines import Deadlines
from ._dispatch import MAX_BATCH, Dispatcher, error_body
from ._pool import DecisionPool
from ._rules import GuardianRules

__all__ = ["ENDPOINTS", "GuardianApp", "ServerErrorCode", "create_app"]

logger = logging.getLogger("agentguard.guardian.server")

ENDPOINTS = ("/", "/aos")
"""The paths the guardian answers on."""

_REALM = "agentguard-guardian"


class ServerErrorCode(enum.IntEnum):
    """JSON-RPC codes of the refusals made at the HTTP level (the server range -32000..-32099)."""

    UNAUTHORIZED = -32001
    PAYLOAD_TOO_LARGE = -32002
    UNSUPPORTED_MEDIA_TYPE = -32003
    METHOD_NOT_ALLOWED = -32004
    NOT_FOUND = -32005
    REQUEST_TIMEOUT = -32006


class _Answer:
    """One HTTP answer: status, body, extra headers."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, status: int, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or []


def _refuse(status: int, code: int, message: str, **headers: str) -> _Answer:
    extra = [
        (name.replace("_", "-").lower().encode(), value.encode("latin-1")) for name, value in headers.items()
    ]
    return _Answer(status, error_body(code, message), extra)


def _latin1(value: bytes | None) -> str | None:
    """A header's value as text (the bytes sent, one character each), as starlette's ``Headers`` give it."""
    return None if value is None else value.decode("latin-1")


class _Disconnected(Exception):
    """The client went away before its body was read."""


class _TooSlow(Exception):
    """The body did not arrive within the body timeout."""


class GuardianApp:
    """The reference guardian's ASGI application, its settings bound once (see :func:`create_app`)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        token: str | None,
        max_body_bytes: int,
        body_timeout: float,
        tracing: ServerTracing,
        rule_threads: int,
    ) -> None:
        self.dispatcher = dispatcher
        self.token = None if token is None else token.encode()
        self.open_without_token = token is None
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.tracing = tracing
        self.pool = DecisionPool(dispatcher.handle, rule_threads)
        self._too_large = f"Request body larger than {max_body_bytes} bytes"
        self._deadlines: dict[asyncio.AbstractEventLoop, Deadlines] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":  # a WebSocket: not served
            return
        headers = Headers(scope=scope)
        server = scope.get("server") or (None, None)
        client = scope.get("client")
        with self.tracing.serve(headers, server[0], server[1], client[0] if client else None) as traced:
            answer = await self._respond(scope, receive, traced)
            traced.finish(answer.status, answer.body if answer.status == 200 else None)
        response_headers = [
            (b"content-length", str(len(answer.body)).encode()),
            *([(b"content-type", b"application/json")] if answer.body else []),
            *answer.headers,
        ]
        await send({"type": "http.response.start", "status": answer.status, "headers": response_headers})
        await send({"type": "http.response.body", "body": answer.body})

    async def _respond(self, scope: Scope, receive: Receive, traced: ServerSpan) -> _Answer:
        try:
            refusal = self._check_head(scope)
            if refusal is not None:
                return refusal
            body = await self._read_body(receive)
            if body is None:
                return _refuse(413, ServerErrorCode.PAYLOAD_TOO_LARGE, self._too_large, connection="close")
            traced.describe(body)
            answer = await self.pool.run(body)
        except _Disconnected:
            return _Answer(400)  # nobody is listening; uvicorn drops it
        except _TooSlow:
            message = f"Request body not received within {self.body_timeout:g} s"
            return _refuse(408, ServerErrorCode.REQUEST_TIMEOUT, message, connection="close")
        except Exception:
            logger.exception("internal error in the guardian's HTTP layer")
            return _refuse(200, ErrorCode.INTERNAL_ERROR, "Internal error")
        if answer is None:
            return _Answer(204)
        return _Answer(200, answer)

    def _check_head(self, scope: Scope) -> _Answer | None:
        fields: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:  # the first of each, as starlette's Headers reads them
            fields.setdefault(name, value)
        if self.token is not None:
            authorization = _latin1(fields.get(b"authorization")) or ""
            challenge = bearer_challenge(authorization, self.token, realm=_REALM)
            if challenge is not None:
                return _refuse(401, ServerErrorCode.UNAUTHORIZED, "Unauthorized", www_authenticate=challenge)
        if scope["path"] not in ENDPOINTS:
            return _refuse(404, ServerErrorCode.NOT_FOUND, "Not found: the guardian answers on / and /aos")
        if scope["method"] != "POST":
            return _refuse(
                405, ServerErrorCode.METHOD_NOT_ALLOWED, "Method not allowed: use POST", allow="POST"
            )
        content_type = fields.get(b"content-type")
        if content_type != b"application/json" and not is_json_media_type(_latin1(content_type)):
            return _refuse(
                415, ServerErrorCode.UNSUPPORTED_MEDIA_TYPE, "Unsupported media type: send application/json"
            )
        codings = content_codings(
            value.decode("latin-1") for name, value in scope["headers"] if name == b"content-encoding"
        )
        if codings:
            # Read as it came, a gzip-labelled body is one request to the guardian and another to any proxy
            # or log that inflates it; inflated, a small body outgrows max_body_bytes. Neither, then.
            named = excerpt(", ".join(codings))
            message = f"Unsupported media type: content-encoding {named}: send the body uncompressed"
            return _refuse(415, ServerErrorCode.UNSUPPORTED_MEDIA_TYPE, message, accept_encoding="identity")
        if declared_too_large(_latin1(fields.get(b"content-length")), self.max_body_bytes):
            return _refuse(413, ServerErrorCode.PAYLOAD_TOO_LARGE, self._too_large, connection="close")
        return None

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body, or ``None`` as soon as it grows past ``max_body_bytes`` (a missing or false
        Content-Length). :class:`_TooSlow` when it has not all arrived ``body_timeout`` seconds after the
        read began: a total, so that trickling bytes does not extend it."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("the guardian app runs in an asyncio task")
        loop = task.get_loop()
        deadlines = self._deadlines.get(loop)
        if deadlines is None:
            deadlines = self._deadlines.setdefault(loop, Deadlines(loop, self.body_timeout))
        deadlines.start(task)
        try:
            parts: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Disconnected
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body_bytes:
                    return None
                parts.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(parts)
        except asyncio.CancelledError:
            if deadlines.expired(task):
                raise _TooSlow from None
            raise
        finally:
            deadlines.stop(task)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.pool.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_app(
    rules: GuardianRules,
    *,
    token: str | None = None,
    max_body_bytes: int = 1_048_576,
    body_timeout: float = 10.0,
    rule_threads: int = 2,
    max_batch: int = MAX_BATCH,
    version: str = __version__,
    tracer_provider: TracerProvider | None = None,
) -> GuardianApp:
    """The reference guardian: answers AOS requests on ``/`` and ``/aos`` with ``rules``' decisions.

    ``token``, when given, is the bearer token every request must carry (compared in constant time).
    ``max_body_bytes`` and ``body_timeout`` bound one request's body (size; seconds for all of it to
    arrive). ``rule_threads`` is the size of the thread pool that decides requests (one of them decides
    while it keeps up). ``max_batch`` is the most requests one JSON-RPC batch may hold: a longer batch is
    answered with one -32600 error, none of its requests decided. ``version`` is what ``ping`` reports
    (default: agentguard's version).
    ``tracer_provider`` makes the SERVER spans (default: the global tracer provider). The connection limits
    (head deadline, connection cap, keep-alive) are the server's: :func:`serve_in_thread` / the command line,
    with :class:`~agentguard.serving.ServerLimits`.
    """
    require_bounds(
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        rule_threads=rule_threads,
        max_batch=max_batch,
    )
    return GuardianApp(
        Dispatcher(rules, version, max_batch=max_batch),
        token,
        max_body_bytes,
        body_timeout,
        ServerTracing(tracer_provider),
        rule_threads,
    )
