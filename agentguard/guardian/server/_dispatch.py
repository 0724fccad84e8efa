"""JSON-RPC 2.0 for the reference guardian: one request body in, one response body (or none) out.

This is the whole protocol and does no I/O, so that it can be tested and fuzzed without a socket; the HTTP
layer around it only checks headers and limits. What it guarantees, for any bytes at all:

- bytes that are not UTF-8 JSON (``NaN`` and ``Infinity`` included) -> ``-32700`` with ``id: null``;
- a value that is not a request object, or an empty batch -> ``-32600``;
- a method AOS does not have -> ``-32601``; params that do not fit it -> ``-32602`` naming each field;
- anything that goes wrong while deciding -> ``-32603`` (logged here; no detail leaves the server);
- a notification (a valid request without ``id``) is decided and logged but never answered, even when
  it fails; a batch is answered by an array of the non-notification answers, or by nothing at all.

Requests are read in both the specification text's and the published schema's shapes and handed to the
rules in the text's shape (:func:`agentguard.aos.normalize_request`).
"""

from __future__ import annotations

import json
import logging
from typing import Any, NoReturn

from agentguard.aos import (
    AOSRequest,
    AOSRequestError,
    AOSSuccessResult,
    ErrorCode,
    InvalidRequestError,
    JSONObject,
    JSONRPCError,
    JSONRPCErrorResponse,
    PingRequest,
    PingRequestResult,
    RequestId,
    WireModel,
    dump,
    normalize_request,
    parse_request,
    utc_timestamp,
)

from ._rules import GuardianRules

__all__ = ["Dispatcher", "error_body"]

logger = logging.getLogger("agentguard.guardian.server")


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _encode(response: WireModel) -> bytes:
    return _encode_json(dump(response))


def _encode_json(data: JSONObject) -> bytes:
    # ASCII output: a string may hold a lone surrogate (a valid JSON escape, not valid UTF-8), which only an
    # escape can carry. The models refuse NaN and the infinities; allow_nan=False makes sure no body that a
    # client cannot parse ever leaves (it would surface as an internal error instead).
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode("ascii")


def _error(request_id: RequestId | None, code: int, message: str) -> JSONRPCErrorResponse:
    return JSONRPCErrorResponse(id=request_id, error=JSONRPCError(code=code, message=message))


def error_body(code: int, message: str) -> bytes:
    """A JSON-RPC error response with ``id: null``, for refusals made before the body is read."""
    return _encode(_error(None, code, message))


class Dispatcher:
    """Answers JSON-RPC request bodies with ``rules``' decisions and ``ping`` results. Thread-safe."""

    def __init__(self, rules: GuardianRules, version: str) -> None:
        self.rules = rules
        self.version = version

    def handle(self, body: bytes) -> bytes | None:
        """The response body for ``body``, or ``None`` when nothing is to be answered (notifications)."""
        try:
            payload = json.loads(body.decode("utf-8"), parse_constant=_no_constants)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return _encode(_error(None, ErrorCode.PARSE_ERROR, "Parse error: the body is not valid JSON"))
        if not isinstance(payload, list):
            return self._handle_one(payload)
        if not payload:
            return _encode(_error(None, ErrorCode.INVALID_REQUEST, "Invalid Request: empty batch"))
        answers = [answer for answer in map(self._handle_one, payload) if answer is not None]
        return b"[" + b",".join(answers) + b"]" if answers else None

    def _handle_one(self, obj: Any) -> bytes | None:
        try:
            wire = normalize_request(obj)
            request = parse_request(wire)
        except AOSRequestError as error:
            # Debug only: the client is told why, and a flood of bad requests must not flood the log.
            logger.debug("refused request (%s): %s", int(error.code), error.message)
            # A valid request without an id is a notification: never answered. An invalid one is answered.
            notification = isinstance(obj, dict) and "id" not in obj
            if notification and not isinstance(error, InvalidRequestError):
                return None
            return _encode(error.to_response())
        try:
            return self._answer(request, wire)
        except Exception:
            logger.exception("internal error while answering %s %r", request.method, request.id)
            if request.id is None:
                return None
            return _encode(_error(request.id, ErrorCode.INTERNAL_ERROR, "Internal error"))

    def _answer(self, request: AOSRequest, wire: JSONObject) -> bytes | None:
        result = self._result(request, wire)
        if request.id is None:
            logger.debug("notification %s decided: %s", request.method, dump(result))
            return None
        # The envelope is written directly: its members are fixed and the result is a validated model.
        return _encode_json({"jsonrpc": "2.0", "id": request.id, "result": dump(result)})

    def _result(self, request: AOSRequest, wire: JSONObject) -> AOSSuccessResult | PingRequestResult:
        if isinstance(request, PingRequest):
            return PingRequestResult(status="connected", version=self.version, timestamp=utc_timestamp())
        decision = self.rules.decide(request, wire)
        logger.debug("%s %r: %s (%s)", request.method, request.id, decision.decision.value, decision.message)
        return decision
