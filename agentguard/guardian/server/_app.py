"""The reference guardian as an ASGI application (Starlette): AOS JSON-RPC over HTTP POST.

The HTTP layer refuses, before reading a request's JSON, what is not for it -- each refusal an HTTP status
with a JSON-RPC error body (``id: null``, codes from the server range of §6.1) so that any client can read
why::

    405  -32004  not POST (``Allow: POST``)
    401  -32001  no or wrong bearer token, when the app has one (``WWW-Authenticate: Bearer ...``)
    415  -32003  Content-Type is not application/json (a charset other than UTF-8 included)
    413  -32002  the body is larger than ``max_body_bytes`` (declared or as it streams in)

Everything else is JSON-RPC, answered with HTTP 200 (or 204 when there is nothing to answer), including
internal errors: a guardian never answers a 500 with a traceback.

Each request is an OpenTelemetry SERVER span ``aos {method}`` (``opentelemetry-api`` only: the host's SDK,
if any, records it) whose parent is read from the request's W3C ``traceparent``: an agentguard client sends
it, so the guardian's work shows up inside the agent's trace, below the step it decided.
"""

from __future__ import annotations

import enum
import logging

try:
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.types import Receive, Scope, Send
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the reference guardian needs Starlette and uvicorn: pip install 'agentguard[server]'"
    ) from exc

from opentelemetry.trace import TracerProvider

from agentguard import __version__
from agentguard._httputil import bearer_challenge, declared_too_large, is_json_media_type, read_limited
from agentguard.aos import ErrorCode
from agentguard.guardian._tracing import ServerSpan, ServerTracing

from ._dispatch import Dispatcher, error_body
from ._rules import GuardianRules

__all__ = ["ENDPOINTS", "ServerErrorCode", "create_app"]

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


def _refuse(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        error_body(code, message), status_code=status, headers=headers, media_type="application/json"
    )


class _Endpoint:
    """The one endpoint, with its settings bound once at creation.

    It is a plain ASGI app rather than a Starlette request function so that it sees every HTTP method and
    answers the wrong ones itself, with a readable body.
    """

    def __init__(
        self, dispatcher: Dispatcher, token: str | None, max_body_bytes: int, tracing: ServerTracing
    ) -> None:
        self.dispatcher = dispatcher
        self.token = None if token is None else token.encode()
        self.max_body_bytes = max_body_bytes
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        server = scope.get("server") or (None, None)
        client = request.client.host if request.client is not None else None
        with self.tracing.serve(request.headers, server[0], server[1], client) as traced:
            response = await self._respond(request, traced)
            traced.finish(response.status_code, bytes(response.body) if response.status_code == 200 else None)
            await response(scope, receive, send)

    async def _respond(self, request: Request, traced: ServerSpan) -> Response:
        try:
            refusal = self._check_headers(request)
            if refusal is not None:
                return refusal
            body = await read_limited(request.stream(), self.max_body_bytes)
            if body is None:
                return _refuse(
                    413,
                    ServerErrorCode.PAYLOAD_TOO_LARGE,
                    f"Request body larger than {self.max_body_bytes} bytes",
                )
            traced.describe(body)
            answer = self.dispatcher.handle(body)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening; uvicorn drops it
        except Exception:
            logger.exception("internal error in the guardian's HTTP layer")
            return _refuse(200, ErrorCode.INTERNAL_ERROR, "Internal error")
        if answer is None:
            return Response(status_code=204)
        return Response(answer, media_type="application/json")

    def _check_headers(self, request: Request) -> Response | None:
        if request.method != "POST":
            return _refuse(
                405, ServerErrorCode.METHOD_NOT_ALLOWED, "Method not allowed: use POST", {"Allow": "POST"}
            )
        if self.token is not None:
            challenge = bearer_challenge(request.headers.get("authorization", ""), self.token, realm=_REALM)
            if challenge is not None:
                return _refuse(
                    401, ServerErrorCode.UNAUTHORIZED, "Unauthorized", {"WWW-Authenticate": challenge}
                )
        if not is_json_media_type(request.headers.get("content-type")):
            return _refuse(
                415, ServerErrorCode.UNSUPPORTED_MEDIA_TYPE, "Unsupported media type: send application/json"
            )
        if declared_too_large(request.headers.get("content-length"), self.max_body_bytes):
            return _refuse(
                413,
                ServerErrorCode.PAYLOAD_TOO_LARGE,
                f"Request body larger than {self.max_body_bytes} bytes",
            )
        return None


def create_app(
    rules: GuardianRules,
    *,
    token: str | None = None,
    max_body_bytes: int = 1_048_576,
    version: str = __version__,
    tracer_provider: TracerProvider | None = None,
) -> Starlette:
    """The reference guardian: answers AOS requests on ``/`` and ``/aos`` with ``rules``' decisions.

    ``token``, when given, is the bearer token every request must carry (compared in constant time).
    ``version`` is what ``ping`` reports (default: agentguard's version). ``tracer_provider`` makes the
    SERVER spans (default: the global tracer provider).
    """
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    endpoint = _Endpoint(Dispatcher(rules, version), token, max_body_bytes, ServerTracing(tracer_provider))
    return Starlette(routes=[Route(path, endpoint) for path in ENDPOINTS])
