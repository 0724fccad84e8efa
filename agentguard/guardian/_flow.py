"""The guardian exchange as sans-I/O code: every decision about the wire is made here, once.

Why this shape: the same exchange runs from synchronous agents, from asyncio agents and from the observe
worker thread. Writing it twice (as sentry-python's httpx integration does) lets the copies drift, and a drift
in a guard is a hole. So, as in httpx's ``Auth.auth_flow``, a *flow* is a generator that yields effects —
:class:`Send` ("send this HTTP request and give me what came back") and :class:`Sleep` ("wait this long") —
and returns its result. The drivers in :mod:`agentguard.guardian._client` only perform those effects::

    flow = decision_flow(settings, encode_step(request), ping_first=False)
    effect = next(flow)
    # Send -> reply = the response, read whole within effect.timeout and effect.limit (or TooLarge),
    #         or the httpx.RequestError raised (a timeout once effect.timeout has passed)
    # Sleep -> time.sleep(effect.seconds); reply = None
    effect = flow.send(reply)     # ... until StopIteration carries the GuardianVerdict

What a flow checks, in order: HTTP status (2xx, else ``http <status>``), a JSON body read the one way every
standards parser reads it (UTF-8, no key given twice in any object, no ``NaN``/``Infinity`` or number too
large for a double: RFC 8259 leaves such documents' meaning open, so they are no decision) and labelled
``application/json`` (AOS §2: a 200 page from a proxy or a misrouted service is not the guardian's answer,
whatever it holds), a JSON-RPC 2.0 envelope (one object -- a batch answers no single request --
``jsonrpc == "2.0"``, exactly one of ``result``/``error``,
``id`` equal to the request's), then the AOS result (``decision`` in allow/deny/modify; a ``modify`` must
carry a ``modifiedRequest`` that is a whole JSON-RPC request with the same ``id`` and ``method``, an object
``params``, and the same tool, execution or message role as the request: :data:`_IDENTITY`). Any miss is a
failure verdict with its cause; whether the step then proceeds is the ``on_failure`` policy's call -- unless
the refused reply says deny in any reading (:func:`_deny_reading`): a step the guardian denied never proceeds.
Whatever the guardian wrote that a cause quotes (an error message, a ``decision`` or ``id`` of the wrong kind)
is shown as :func:`~agentguard.guardian._logged.logged` shows it: escaped and cut, because the cause becomes
the step's recorded reason, a log line and a span status.
"""

from __future__ import annotations

import json
import time
import unicodedata
import uuid
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, TypeVar

import httpx

from agentguard._deadline import TooLarge
from agentguard._httputil import is_json_media_type
from agentguard.aos import AmbiguousJSON, normalize_request, strict_json
from agentguard.guardian._logged import logged
from agentguard.guardian._retry import GuardianRetry
from agentguard.guardian._types import GuardianOutcome, GuardianUnavailable, GuardianVerdict

__all__ = [
    "DEFAULT_MAX_REPLY_BYTES",
    "Effect",
    "Flow",
    "Reply",
    "Send",
    "Settings",
    "Sleep",
    "Step",
    "decision_flow",
    "describe",
    "encode_step",
    "no_decision",
    "ping_flow",
    "request_identity",
]

T = TypeVar("T")

DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
"""Default cap on a guardian's answer: a ``modify`` carries a whole request, so room for large tool inputs."""

_DECISIONS = {"allow": GuardianOutcome.ALLOW, "deny": GuardianOutcome.DENY, "modify": GuardianOutcome.MODIFY}

_IDENTITY: dict[str, tuple[tuple[str, ...], ...]] = {
    "steps/toolCallRequest": (("toolCallRequest", "toolId"), ("toolCallRequest", "executionId")),
    "steps/toolCallResult": (("executionId",),),
    "steps/message": (("message", "role"),),
}
"""Members of ``params`` (in the text's shape) a ``modify`` may not change: which step it is. The Guard takes
only the new payload from a modified request -- a tool's inputs, a result's outputs, a message's text -- and
carries it out as the step it asked about, so a modify naming another tool, execution or role would have the
agent do what the guardian never approved (``send-email`` run with inputs approved for ``draft-email``)."""


@dataclass(frozen=True, slots=True)
class Send:
    """Effect: send ``request`` and resume the flow with the response (body read) or the error raised.

    ``timeout`` (seconds) bounds the whole exchange -- connect, send, headers and every chunk of the body
    together -- and ``limit`` the body's size: past either, the driver stops and resumes the flow with an
    ``httpx.TimeoutException`` or a :class:`TooLarge`.
    """

    request: httpx.Request
    timeout: float
    limit: int


@dataclass(frozen=True, slots=True)
class Sleep:
    """Effect: wait ``seconds`` (a retry back-off), then resume the flow with ``None``."""

    seconds: float


Effect = Send | Sleep
Reply = httpx.Response | httpx.RequestError | TooLarge | None
Flow = Generator[Effect, Reply, T]


@dataclass(frozen=True, slots=True)
class Settings:
    """What a flow needs to know about the client; resolved once at construction."""

    url: str
    headers: httpx.Headers
    timeout: float
    retry: GuardianRetry | None
    on_failure: Literal["deny", "allow"]
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES


@dataclass(frozen=True, slots=True)
class _Failure:
    """Why an exchange produced no decision. ``kind`` is matched against ``GuardianRetry.retry_on``;
    ``answer`` is the body of an answer refused for its HTTP status (it may still say deny)."""

    kind: str
    cause: str
    answer: bytes = b""


def request_identity(request: object) -> tuple[str | int, str]:
    """The ``id`` and ``method`` of an AOS request dict; raises if it is not one (a programming error)."""
    if not isinstance(request, dict):
        raise TypeError(f"an AOS request must be a dict (wire JSON), got {type(request).__name__}")
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        raise ValueError(f"an AOS request needs a string or integer 'id', got {request_id!r}")
    method = request.get("method")
    if not isinstance(method, str):
        raise ValueError(f"an AOS request needs a string 'method', got {method!r}")
    return request_id, method


@dataclass(frozen=True, slots=True)
class Step:
    """An AOS request ready to send: its correlation fields and its encoded body."""

    request_id: str | int
    method: str
    body: bytes


def encode_step(request: object) -> Step:
    """Check and serialise an AOS request; raises TypeError/ValueError for one that is not valid JSON-RPC."""
    request_id, method = request_identity(request)
    # ASCII output: a string may hold a lone surrogate (e.g. a tool output decoded with surrogateescape),
    # which only a JSON escape can carry; UTF-8 encoding would refuse it.
    body = json.dumps(request, separators=(",", ":"), allow_nan=False).encode("ascii")
    return Step(request_id, method, body)


def decision_flow(settings: Settings, step: Step, *, ping_first: bool) -> Flow[GuardianVerdict]:
    """Ask the guardian about one step; always returns a verdict, retrying per ``settings.retry``.

    With ``ping_first`` the guardian is pinged before the step; if the ping fails, the step is not sent and
    the verdict is a ``NO_DECISION`` whose cause starts with ``"ping: "``.
    """
    started = time.perf_counter()
    if ping_first:
        pinged = yield from _ping_exchange(settings, round(settings.timeout * 1000))
        if isinstance(pinged, _Failure):
            return no_decision(settings, f"ping: {pinged.cause}", started, attempts=0)
    outcome, attempts = yield from _exchange(
        settings, _post(settings, step.body, settings.timeout), settings.timeout
    )
    if isinstance(outcome, _Failure):
        return _refused(settings, outcome, outcome.answer, started, attempts)
    decided = _interpret_decision(outcome, step)
    if isinstance(decided, _Failure):
        return _refused(settings, decided, outcome.content, started, attempts)
    return GuardianVerdict(
        outcome=decided.outcome,
        message=decided.message,
        reasoning=decided.reasoning,
        reason_codes=decided.reason_codes,
        modified_request=decided.modified_request,
        proceeded=decided.outcome is not GuardianOutcome.DENY,
        latency_ms=_elapsed_ms(started),
        attempts=attempts,
        data=decided.data,
    )


def _refused(
    settings: Settings, failure: _Failure, answer: bytes, started: float, attempts: int
) -> GuardianVerdict:
    """The verdict on an exchange that ended in ``failure``, ``answer`` being the body the guardian sent.

    ``on_failure="allow"`` is for a guardian that gave no decision, not for one that denied in a reply with
    another member malformed, that can also be read as allow (a key given twice), that came with an error
    status (a ``403`` carrying a JSON-RPC deny) or that answered one request with a batch: such a step never
    proceeds (:func:`_deny_reading`).
    """
    why = _deny_reading(answer)
    if why is not None:
        return no_decision(
            settings, f"{failure.cause} ({why}: not proceeding)", started, attempts, proceeded=False
        )
    return no_decision(settings, failure.cause, started, attempts)


def ping_flow(settings: Settings, timeout_ms: int) -> Flow[dict[str, object]]:
    """Send an AOS ``ping``; return its ``PingRequestResult`` or raise :class:`GuardianUnavailable`."""
    pinged = yield from _ping_exchange(settings, timeout_ms)
    if isinstance(pinged, _Failure):
        raise GuardianUnavailable(pinged.cause)
    return pinged


def _ping_exchange(settings: Settings, timeout_ms: int) -> Flow[dict[str, object] | _Failure]:
    ping_id = f"ping-{uuid.uuid4().hex}"
    timestamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": ping_id,
            "method": "ping",
            "params": {"timestamp": timestamp, "timeout": timeout_ms},
        }
    ).encode()
    outcome, _ = yield from _exchange(settings, _post(settings, body, timeout_ms / 1000), timeout_ms / 1000)
    if isinstance(outcome, _Failure):
        return outcome
    result = _unwrap_envelope(outcome, ping_id)
    if isinstance(result, _Failure):
        return result
    status = result.get("status")
    if status not in ("connected", "error"):
        return _malformed(f"ping status must be 'connected' or 'error', got {logged(status)}")
    for field in ("version", "timestamp"):
        if not isinstance(result.get(field), str):
            return _malformed(f"ping result needs a string {field!r}")
    if status == "error":
        return _Failure("status", "guardian reports status 'error'")
    return result


def _post(settings: Settings, body: bytes, timeout: float) -> httpx.Request:
    # Each socket operation is also capped at the whole exchange's timeout (as httpx's own build_request
    # does): on a transport the driver cannot clamp to the deadline, no single read outlives it either.
    return httpx.Request(
        "POST",
        settings.url,
        content=body,
        headers=settings.headers,
        extensions={"timeout": httpx.Timeout(timeout).as_dict()},
    )


def _exchange(
    settings: Settings, request: httpx.Request, timeout: float
) -> Flow[tuple[httpx.Response | _Failure, int]]:
    """Send ``request`` until it gets a 2xx response or a failure that may not be retried.

    Each attempt may take ``timeout`` seconds in all. Returns the last outcome and how many requests were
    made.
    """
    retry = settings.retry
    attempt = 0
    while True:
        attempt += 1
        outcome = _classify((yield Send(request, timeout, settings.max_reply_bytes)))
        if (
            isinstance(outcome, httpx.Response)
            or retry is None
            or attempt > retry.attempts
            or outcome.kind not in retry.retry_on
        ):
            return outcome, attempt
        yield Sleep(retry.delay(attempt) / 1000)


def _classify(reply: Reply) -> httpx.Response | _Failure:
    if isinstance(reply, httpx.TimeoutException):
        return _Failure("timeout", "timeout")
    if isinstance(reply, httpx.TransportError):
        return _Failure("transport", f"transport: {describe(reply)}")
    if isinstance(reply, httpx.RequestError):
        # e.g. httpx.DecodingError: the guardian answered, but with a body that cannot be decoded.
        return _malformed(describe(reply))
    if isinstance(reply, TooLarge):
        return _Failure("too-large", f"reply too large: more than {reply.limit} bytes")
    if reply is None:
        raise RuntimeError("flow driver resumed a Send effect without a reply")
    status = reply.status_code
    if 200 <= status < 300:
        return reply
    kind = "http-5xx" if status >= 500 else "http-429" if status == 429 else "http"
    return _Failure(kind, f"http {status}", reply.content)


def _decode_json(body: bytes) -> object | _Failure:
    """The body as JSON read strictly (UTF-8, RFC 8259 §8.1), or the failure."""
    try:
        decoded: object = strict_json(body)
    except UnicodeDecodeError:
        return _malformed("body is not UTF-8")
    except AmbiguousJSON as exc:
        return _malformed(logged(str(exc)))  # it quotes the key given twice: as long as the peer made it
    except (ValueError, RecursionError) as exc:
        return _malformed(f"body is not JSON ({type(exc).__name__})")
    return decoded


_ABSENT = object()


class _Pairs(list[tuple[str, object]]):
    """A JSON object as every member it was written with, a repeated key included."""


def _deny_reading(body: bytes) -> str | None:
    """Why a reply that was refused must not proceed whatever ``on_failure`` says, or ``None``: some reading of
    it has a ``result`` whose ``decision`` means deny, or it nests too deeply to be read here at all.

    Read as leniently as any parser might (every member of a repeated key, ``NaN``, the ``decision`` in any
    case and spacing, or inside a list; each answer of a batch, each object of a ``result`` that is a list),
    because it only ever keeps a step from proceeding. A reply nested past Python's recursion limit (about a
    thousand levels) is read by parsers with deeper limits -- a deny whose ``data`` echoes a deeply nested
    tool input is still a deny to them -- so it is not taken as silence. The work is linear in the body,
    which ``max_reply_bytes`` bounds.
    """
    try:
        document = json.loads(body, object_pairs_hook=_Pairs)
    except RecursionError:
        return "the reply nests too deeply to tell whether it says deny"
    except ValueError:
        return None
    results = [value for envelope in _objects([document]) for key, value in envelope if key == "result"]
    decisions = [value for result in _objects(results) for key, value in result if key == "decision"]
    return "the reply says deny" if any(_means_deny(decision) for decision in decisions) else None


def _objects(values: list[object]) -> list[_Pairs]:
    """The objects among ``values``, and those in any of them that is an array (one level: a batch, or a
    ``result`` written as a list)."""
    found: list[_Pairs] = []
    for value in values:
        if isinstance(value, _Pairs):
            found.append(value)
        elif type(value) is list:
            found.extend(item for item in value if isinstance(item, _Pairs))
    return found


def _means_deny(decision: object) -> bool:
    """Whether ``decision`` is a string that reads as deny, or an array holding one at any depth (walked
    without recursion: the depth is the guardian's to choose)."""
    pending = [decision]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _as_seen(item).casefold() == "deny":
                return True
        elif type(item) is list:
            pending.extend(item)
    return False


def _as_seen(text: str) -> str:
    """``text`` as a reader may take it: compatibility-folded (fullwidth ``DENY`` is ``DENY``), without whitespace and
    without what shows nothing or ends a C string (controls such as NUL, zero-width and other format
    characters, lone surrogates)."""
    folded = unicodedata.normalize("NFKC", text)
    return "".join(char for char in folded if not char.isspace() and unicodedata.category(char)[0] != "C")


def _unwrap_envelope(response: httpx.Response, request_id: str | int) -> dict[str, object] | _Failure:
    """Check the JSON-RPC response envelope; return its ``result`` object or the failure."""
    envelope = _decode_json(response.content)
    if isinstance(envelope, _Failure):
        return envelope
    if isinstance(envelope, list):
        # One request was sent, so a batch is no answer to it, whatever its members say and however many
        # there are (duplicates, ids never asked): refused whole, like any malformed reply.
        return _malformed(f"body is a batch of {len(envelope)} responses to one request")
    if not isinstance(envelope, dict):
        return _malformed("body is not a JSON object")
    content_type = response.headers.get("content-type")
    if not is_json_media_type(content_type):
        return _malformed(f"Content-Type {logged(content_type)} is not application/json in UTF-8")
    if envelope.get("jsonrpc") != "2.0":
        return _malformed(f"jsonrpc must be '2.0', got {logged(envelope.get('jsonrpc'))}")
    if ("result" in envelope) == ("error" in envelope):
        return _malformed("a response needs exactly one of 'result' and 'error'")
    response_id = envelope.get("id")
    if "error" in envelope:
        error = envelope["error"]
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(code, bool) or not isinstance(code, int) or not isinstance(message, str):
            return _malformed("error must be an object with an integer 'code' and a string 'message'")
        # A JSON-RPC error answers with id null when the guardian could not read the request's id; the
        # error itself is then the more useful cause, so it is reported even though the ids differ.
        if response_id is not None and not _same_id(response_id, request_id):
            return _id_mismatch(request_id, response_id)
        # The message is the guardian's text -- often ours quoted back ("Method not found: <the step's
        # method>", which a relayed A2A peer chose) -- and becomes the step's recorded reason: shown bounded.
        return _Failure("jsonrpc", f"jsonrpc {code}: {logged(message)}")
    if not _same_id(response_id, request_id):
        return _id_mismatch(request_id, response_id)
    result = envelope["result"]
    if not isinstance(result, dict):
        return _malformed("result is not an object")
    return result


@dataclass(frozen=True, slots=True)
class _Decided:
    outcome: GuardianOutcome
    message: str | None
    reasoning: str | None
    reason_codes: tuple[str, ...]
    modified_request: dict[str, object] | None
    data: dict[str, object] | None


def _interpret_decision(response: httpx.Response, step: Step) -> _Decided | _Failure:
    result = _unwrap_envelope(response, step.request_id)
    if isinstance(result, _Failure):
        return result
    if "decision" not in result:
        return _malformed("result has no 'decision'")
    outcome = _DECISIONS.get(result["decision"]) if isinstance(result["decision"], str) else None
    if outcome is None:
        return _malformed(f"decision must be 'allow', 'deny' or 'modify', got {logged(result['decision'])}")
    # The AOS text makes `message` required, but a decision without one is still unambiguous: it is
    # accepted, and only a value of the wrong type makes the reply malformed.
    message, reasoning = result.get("message"), result.get("reasoning")
    if message is not None and not isinstance(message, str):
        return _malformed("message is not a string")
    if reasoning is not None and not isinstance(reasoning, str):
        return _malformed("reasoning is not a string")
    reason_codes = result.get("reasonCode")
    if reason_codes is None:
        reason_codes = []
    if not isinstance(reason_codes, list) or not all(isinstance(code, str) for code in reason_codes):
        return _malformed("reasonCode is not a list of strings")
    data = result.get("data")
    if data is not None and not isinstance(data, dict):
        return _malformed("data is not an object")
    modified: dict[str, object] | None = None
    if outcome is GuardianOutcome.MODIFY:
        checked = _check_modified_request(result.get("modifiedRequest"), step)
        if isinstance(checked, _Failure):
            return checked
        modified = checked
    return _Decided(outcome, message, reasoning, tuple(reason_codes), modified, data)


def _check_modified_request(candidate: object, step: Step) -> dict[str, object] | _Failure:
    """A ``modifiedRequest`` replaces the whole request, so it must be one that could have been sent, about
    the same step."""
    request_id, method = step.request_id, step.method
    if not isinstance(candidate, dict):
        return _unappliable("modifiedRequest is missing or not an object")
    if candidate.get("jsonrpc") != "2.0":
        return _unappliable("modifiedRequest.jsonrpc is not '2.0'")
    if not _same_id(candidate.get("id"), request_id):
        return _unappliable(
            f"modifiedRequest.id {logged(candidate.get('id'))} is not the request's id {logged(request_id)}"
        )
    if candidate.get("method") != method:
        return _unappliable(
            f"modifiedRequest.method {logged(candidate.get('method'))} is not {logged(method)}"
        )
    if not isinstance(candidate.get("params"), dict):
        return _unappliable("modifiedRequest.params is not an object")
    original = _identity(json.loads(step.body))  # the request as sent: its body is our own JSON
    changed = [path for path, value in _identity(candidate).items() if value != original[path]]
    if changed:
        return _unappliable(f"modifiedRequest changes {', '.join(changed)}")
    return candidate


def _identity(request: dict[str, object]) -> dict[str, str | None]:
    """The :data:`_IDENTITY` members of a request of either published shape, each as its JSON text (so that
    ``"1"``, ``1`` and ``true`` differ) or ``None`` if absent, by dotted path."""
    params = normalize_request(request).get("params")
    identity: dict[str, str | None] = {}
    for path in _IDENTITY.get(str(request.get("method")), ()):
        value: object = params
        for key in path:
            value = value.get(key, _ABSENT) if isinstance(value, dict) else _ABSENT
        identity[".".join(path)] = None if value is _ABSENT else json.dumps(value, sort_keys=True)
    return identity


def _same_id(candidate: object, request_id: str | int) -> bool:
    # Strict: "7" is not 7 and true is not 1 — JSON-RPC ids correlate by value *and* type.
    return type(candidate) is type(request_id) and candidate == request_id


def no_decision(
    settings: Settings, cause: str, started: float, attempts: int, *, proceeded: bool | None = None
) -> GuardianVerdict:
    """The verdict for an exchange that ended without a decision; ``on_failure`` says if the step proceeds
    (unless ``proceeded=False`` overrules it)."""
    return GuardianVerdict(
        outcome=GuardianOutcome.NO_DECISION,
        failure=cause,
        proceeded=settings.on_failure == "allow" if proceeded is None else proceeded,
        latency_ms=_elapsed_ms(started),
        attempts=attempts,
    )


def _malformed(detail: str) -> _Failure:
    return _Failure("malformed", f"malformed response: {detail}")


def _unappliable(detail: str) -> _Failure:
    return _Failure("unappliable", f"unappliable modify: {detail}")


def _id_mismatch(request_id: str | int, response_id: object) -> _Failure:
    return _Failure("id", f"id mismatch: sent {logged(request_id)}, got {logged(response_id)}")


def describe(exc: BaseException) -> str:
    """An exception as a failure cause: its class and, shown bounded, its text -- which may quote the peer (an
    HTTP parser's ``illegal status line: bytearray(b'...')`` holds up to 64 KiB of what the guardian sent)."""
    text = str(exc)
    return f"{type(exc).__name__}: {logged(text)}" if text else type(exc).__name__


def _elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
