"""OpenTelemetry for the guardian exchange: a CLIENT span per HTTP request, a SERVER span per AOS request.

Why here, and API-only: the client and the reference guardian are libraries inside someone else's process.
They create spans through ``opentelemetry-api`` and whatever SDK the host configured (none, by default)
decides what becomes of them. The W3C trace context travels in the HTTP headers (``traceparent``), so the
guardian's span joins the agent's trace: one trace shows the turn, the step, the request and the decision.

In observe mode the request is sent later, by the delivery thread; that thread runs each request in a copy
of the submitter's ``contextvars`` context (:class:`~agentguard.guardian._observe.Backlog`), so the CLIENT
span's parent is the step that was current at ``submit()``, not whatever the sender thread has.

Tracing never fails a request: every OpenTelemetry call here is shielded, and a failure is logged
(rate-limited) while the request goes on untraced.

    >>> tracing = RequestTracing(None)          # the global tracer provider (a no-op until an SDK is set)
    >>> request = httpx.Request("POST", "http://127.0.0.1:9/aos", content=b"{}")
    >>> with tracing.request(request, "steps/toolCallRequest", "ag-1") as traced:
    ...     traced.finish(httpx.Response(200))
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextvars import Token
from types import TracebackType
from typing import Self

import httpx
from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import ProxyTracerProvider, Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from agentguard._deadline import TooLarge
from agentguard.aos import known_method, valid_utf8
from agentguard.guardian._observe import RateLimitedLog

__all__ = ["MAX_RECORDED_ID", "ClientSpan", "RequestTracing", "ServerSpan", "ServerTracing"]

_logger = logging.getLogger("agentguard.guardian")
_failures = RateLimitedLog(_logger)

MAX_RECORDED_ID = 128
"""The most characters of a JSON-RPC request id a span records (``rpc.jsonrpc.request_id``); a longer one is
recorded as its first ``MAX_RECORDED_ID`` characters and ``…``."""


def _recorded_id(request_id: str | int) -> str:
    """A request id as a span records it: valid UTF-8 and at most :data:`MAX_RECORDED_ID` characters (and the
    ellipsis). Its sender chooses it, up to the guardian's whole body size (a megabyte), and it lands on every
    span of the request, with content capture off."""
    text = str(request_id)
    if len(text) > MAX_RECORDED_ID:
        text = text[:MAX_RECORDED_ID] + "\u2026"
    return valid_utf8(text)


def _shielded_failure(what: str) -> None:
    _failures.warning(
        "agentguard guardian tracing failed (%s); the request goes on untraced", what, exc_info=True
    )


class _Traced:
    """One span made current for the duration of a ``with`` block, in the thread or task of the block.

    ``span`` is ``None`` when tracing could not start; every method is then a no-op.
    """

    __slots__ = ("_parent", "_token", "span")

    def __init__(self, span: Span | None, parent: Context | None) -> None:
        self.span = span
        self._parent = parent
        self._token: Token[Context] | None = None

    def __enter__(self) -> Self:
        if self.span is not None:
            try:
                self._token = context.attach(trace.set_span_in_context(self.span, self._parent))
            except Exception:
                _shielded_failure("attach")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span = self.span
        if span is None:
            return
        try:
            if exc is not None and span.is_recording():
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR))
        except Exception:
            _shielded_failure("error status")
        finally:
            try:
                if self._token is not None:
                    context.detach(self._token)
            finally:
                try:
                    span.end()
                except Exception:
                    _shielded_failure("end")


class ClientSpan(_Traced):
    """The CLIENT span of one guardian HTTP request."""

    __slots__ = ()

    def finish(self, reply: httpx.Response | httpx.RequestError | TooLarge) -> None:
        """Record how the HTTP request ended: its status code, the transport error it raised, or TooLarge."""
        span = self.span
        if span is None:
            return
        try:
            if not span.is_recording():
                return
            if isinstance(reply, httpx.Response):
                span.set_attribute("http.response.status_code", reply.status_code)
                if reply.status_code >= 400:
                    span.set_attribute("error.type", str(reply.status_code))
                    span.set_status(Status(StatusCode.ERROR))
            else:
                span.set_attribute("error.type", type(reply).__qualname__)
                span.set_status(Status(StatusCode.ERROR))
        except Exception:
            _shielded_failure("client span result")


class RequestTracing:
    """CLIENT spans for one guardian client's HTTP requests; ``None`` means the global tracer provider."""

    __slots__ = ("_tracer",)

    def __init__(self, tracer_provider: TracerProvider | None) -> None:
        self._tracer = trace.get_tracer("agentguard.guardian", tracer_provider=tracer_provider)

    def request(self, request: httpx.Request, method: str, request_id: str | int | None) -> ClientSpan:
        """Start the span of one HTTP request and write its trace context into the request's headers.

        The span is current inside the block, so an HTTP instrumentation of the host (if any) nests below it.
        """
        try:
            url = request.url
            # The method is its sender's to write: as it came, each new one was a new span name (unbounded
            # cardinality) and its text (a lone surrogate fails an OTLP batch) left the process.
            method = known_method(method)
            attributes: dict[str, AttributeValue] = {
                "rpc.system": "jsonrpc",
                "rpc.method": method,
                "rpc.jsonrpc.version": "2.0",
                "server.address": url.host,
                "server.port": url.port or (443 if url.scheme == "https" else 80),
            }
            if request_id is not None:
                attributes["rpc.jsonrpc.request_id"] = _recorded_id(request_id)
            span = self._tracer.start_span(method, kind=SpanKind.CLIENT, attributes=attributes)
        except Exception:
            _shielded_failure("client span")
            return ClientSpan(None, None)
        traced = ClientSpan(span, None)
        try:
            propagate.inject(request.headers, context=trace.set_span_in_context(span))
        except Exception:
            _shielded_failure("inject")
        return traced


class ServerSpan(_Traced):
    """The SERVER span of one request to the reference guardian."""

    __slots__ = ()

    def describe(self, body: bytes) -> None:
        """Name the span after the AOS method in ``body`` (read again only when the span is recorded): ``aos
        {method}`` for a method AOS has, ``aos other`` for any other (:func:`~agentguard.aos.known_method`:
        the method is its sender's to write)."""
        span = self.span
        if span is None:
            return
        try:
            if not span.is_recording():
                return
            try:
                payload = json.loads(body)
            except (ValueError, RecursionError):
                return
            if not isinstance(payload, dict) or not isinstance(payload.get("method"), str):
                return  # a batch or an invalid request: the dispatcher answers it; the span stays "aos"
            method = known_method(payload["method"])
            span.update_name(f"aos {method}")
            span.set_attribute("rpc.method", method)
            request_id = payload.get("id")
            if isinstance(request_id, str | int) and not isinstance(request_id, bool):
                span.set_attribute("rpc.jsonrpc.request_id", _recorded_id(request_id))
        except Exception:
            _shielded_failure("server span name")

    def finish(self, status_code: int, answer: bytes | None) -> None:
        """Record the HTTP status and, for a single AOS decision, the decision itself."""
        span = self.span
        if span is None:
            return
        try:
            if not span.is_recording():
                return
            span.set_attribute("http.response.status_code", status_code)
            if status_code >= 500:
                span.set_attribute("error.type", str(status_code))
                span.set_status(Status(StatusCode.ERROR))
            if answer is None:
                return
            try:
                reply = json.loads(answer)
            except (ValueError, RecursionError):
                return
            result = reply.get("result") if isinstance(reply, dict) else None
            error = reply.get("error") if isinstance(reply, dict) else None
            if isinstance(result, dict) and isinstance(result.get("decision"), str):
                span.set_attribute("agentguard.guardian.decision", result["decision"])
            elif isinstance(error, dict) and isinstance(error.get("code"), int):
                span.set_attribute("rpc.jsonrpc.error_code", error["code"])
        except Exception:
            _shielded_failure("server span result")


_UNTRACED = ServerSpan(None, None)


class ServerTracing:
    """SERVER spans of the reference guardian, continuing the caller's trace from the request headers.

    With the global tracer provider (``tracer_provider=None``) while no SDK has set one, a span would be a
    no-op that costs a guardian several µs a request (the ``traceparent`` read, the context attached and
    detached): nothing is done then, until a provider is set (checked on every request, so a provider set
    after the app was made is used from its next request on).
    """

    __slots__ = ("_global", "_tracer")

    def __init__(self, tracer_provider: TracerProvider | None) -> None:
        self._tracer = trace.get_tracer("agentguard.guardian.server", tracer_provider=tracer_provider)
        self._global = tracer_provider is None

    def serve(
        self, headers: Mapping[str, str], host: str | None, port: int | None, client: str | None
    ) -> ServerSpan:
        """Start the span of one HTTP request (named ``aos`` until :meth:`ServerSpan.describe`)."""
        if self._global and isinstance(trace.get_tracer_provider(), ProxyTracerProvider):
            return _UNTRACED
        try:
            parent = propagate.extract(headers)
            attributes: dict[str, AttributeValue] = {"rpc.system": "jsonrpc", "rpc.jsonrpc.version": "2.0"}
            if host:
                attributes["server.address"] = host
            if port:
                attributes["server.port"] = port
            if client:
                attributes["client.address"] = client
            span = self._tracer.start_span("aos", context=parent, kind=SpanKind.SERVER, attributes=attributes)
        except Exception:
            _shielded_failure("server span")
            return ServerSpan(None, None)
        return ServerSpan(span, parent)
