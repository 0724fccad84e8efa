"""JSON-RPC 2.0 for the reference guardian: one request body in, one response body (or none) out.

This is the whole protocol and does no I/O, so that it can be tested and fuzzed without a socket; the HTTP
layer around it only checks headers and limits. What it guarantees, for any bytes at all:

- bytes that are not UTF-8 JSON (``NaN`` and ``Infinity`` included), or JSON that parsers read differently
  (a key given twice in an object, a number past a double, an integer beyond ±(2**53 - 1):
  :func:`agentguard.aos.strict_json`) -> ``-32700`` with ``id: null``;
- a value that is not a request object -> ``-32600``; an empty batch, or one of more than ``max_batch``
  entries -> one ``-32600`` with ``id: null``, before any entry is read: a body of a million ``1`` entries
  would otherwise cost seconds and be answered with a million errors, forty times its size;
- a method AOS does not have -> ``-32601``; params that do not fit it -> ``-32602`` naming each field (the
  first :data:`._quoted.MAX_FIELD_ERRORS` of them);
- anything that goes wrong while deciding -> ``-32603`` (logged here; no detail leaves the server);
- what the client wrote (an id, an unknown method) is logged bounded and escaped (:func:`._logged.logged`),
  and an answer quotes it bounded (:func:`agentguard._httputil.excerpt`), its ``id`` aside;
- every refusal is logged at debug level only, so that a flood of bad requests does not flood the log;
- a notification (a valid request without ``id``) is decided and logged but never answered, even when
  it fails; a batch is answered by an array of the non-notification answers, or by nothing at all.

Requests are read in both the specification text's and the published schema's shapes and handed to the
rules in the text's shape (:func:`agentguard.aos.normalize_request`).
"""

from __future__ import annotations

import logging
from typing import Any

from agentguard.aos import (
    AmbiguousJSON,
    AOSRequest,
    AOSRequestError,
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
    strict_json,
    utc_timestamp,
)
from agentguard.guardian._logged import logged

from ._json import encode_json
from ._quoted import bounded
from ._rules import UNESCAPED_JSON, GuardianRules

__all__ = ["MAX_BATCH", "Dispatcher", "error_body"]

logger = logging.getLogger("agentguard.guardian.server")

MAX_BATCH = 100
"""The default of ``max_batch``, the most requests one batch may hold. agentguard's client never sends a
batch; a hundred leaves room for one that does, and bounds the work and the answer of one body."""


def _escapes_nothing(text: bytes) -> bool:
    """Whether no string in ``json.loads(text.decode("utf-8"))`` can hold a NUL or a lone surrogate: true when
    ``text`` has no ``\\u`` in it. ``json.loads`` refuses a raw control character in a string, and the strict
    UTF-8 decoding refuses an encoded surrogate, so a ``\\uXXXX`` escape is the only way either gets in.
    (``json.loads`` on the bytes themselves decodes them with ``surrogatepass``: not so.) A ``\\\\u``, an
    escaped backslash before a ``u``, also answers false: a needless walk, never a missed one."""
    return b"\\u" not in text


def _encode(response: WireModel) -> bytes:
    return encode_json(dump(response))


def _error(request_id: RequestId | None, code: int, message: str) -> JSONRPCErrorResponse:
    return JSONRPCErrorResponse(id=request_id, error=JSONRPCError(code=code, message=message))


def error_body(code: int, message: str) -> bytes:
    """A JSON-RPC error response with ``id: null``, for refusals made before the body is read."""
    return _encode(_error(None, code, message))


def _refused(code: int, message: str) -> None:
    """Log a refusal. Debug only: the client is told why, and a flood of bad requests must not flood the
    log. The message may quote the client's method or member names: shown bounded, escaped."""
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("refused request (%d): %s", code, logged(message))


def _refusal(code: int, message: str) -> bytes:
    """The logged answer to a body refused whole (``id: null``)."""
    _refused(code, message)
    return error_body(code, message)


class Dispatcher:
    """Answers JSON-RPC request bodies with ``rules``' decisions and ``ping`` results. Thread-safe.

    ``max_batch`` is the most requests a batch may hold; a longer one is refused whole, none of it decided.
    """

    def __init__(self, rules: GuardianRules, version: str, *, max_batch: int = MAX_BATCH) -> None:
        self.rules = rules
        self.version = version
        self.max_batch = max_batch

    def handle(self, body: bytes) -> bytes | None:
        """The response body for ``body``, or ``None`` when nothing is to be answered (notifications)."""
        try:
            payload = strict_json(body)  # strict UTF-8: see _escapes_nothing
        except AmbiguousJSON as exc:
            # What the agent will run is what its own parser reads: a rule must not decide on another reading.
            return _refusal(ErrorCode.PARSE_ERROR, f"Parse error: {exc}")
        except (UnicodeDecodeError, ValueError, RecursionError):
            return _refusal(ErrorCode.PARSE_ERROR, "Parse error: the body is not valid JSON")
        unescaped = _escapes_nothing(body)
        if not isinstance(payload, list):
            return self._handle_one(payload, unescaped)
        if not payload:
            return _refusal(ErrorCode.INVALID_REQUEST, "Invalid Request: empty batch")
        if len(payload) > self.max_batch:
            message = f"a batch of {len(payload)} requests, more than max_batch ({self.max_batch})"
            return _refusal(ErrorCode.INVALID_REQUEST, f"Invalid Request: {message}")
        answers = [answer for obj in payload if (answer := self._handle_one(obj, unescaped)) is not None]
        return b"[" + b",".join(answers) + b"]" if answers else None

    def _handle_one(self, obj: Any, unescaped: bool) -> bytes | None:
        try:
            wire = normalize_request(obj)
            request = parse_request(wire)
        except AOSRequestError as error:
            _refused(int(error.code), error.message)
            # A valid request without an id is a notification: never answered. An invalid one is answered.
            notification = isinstance(obj, dict) and "id" not in obj
            if notification and not isinstance(error, InvalidRequestError):
                return None
            return _encode(bounded(error).to_response())
        try:
            return self._answer(request, wire, unescaped)
        except Exception:
            logger.exception("internal error while answering %s %s", request.method, logged(request.id))
            if request.id is None:
                return None
            return _encode(_error(request.id, ErrorCode.INTERNAL_ERROR, "Internal error"))

    def _answer(self, request: AOSRequest, wire: JSONObject, unescaped: bool) -> bytes | None:
        result = self._result(request, wire, unescaped)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s %s decided: %s", request.method, logged(request.id), logged(result.decode("ascii"))
            )
        if request.id is None:
            return None
        # The envelope is written directly: its members are fixed and the result is JSON text already.
        return b'{"jsonrpc":"2.0","id":' + encode_json(request.id) + b',"result":' + result + b"}"

    def _result(self, request: AOSRequest, wire: JSONObject, unescaped: bool) -> bytes:
        """The JSON text of the ``result`` member."""
        if isinstance(request, PingRequest):
            return _encode(
                PingRequestResult(status="connected", version=self.version, timestamp=utc_timestamp())
            )
        token = UNESCAPED_JSON.set(wire if unescaped else None)
        try:
            return self.rules.decide_json(request, wire)
        finally:
            UNESCAPED_JSON.reset(token)
