"""What the guardian exchange's spans record of a method and an id their sender wrote.

The reference guardian's SERVER span is named after the request's JSON-RPC ``method``, which any client
writes; the client's CLIENT span after the step's method, which for an A2A step is the peer's. A method
AOS does not have is recorded as ``other`` (a new name per request was unbounded span-name cardinality),
and the request id as valid UTF-8 of at most ``MAX_RECORDED_ID`` characters: one lone surrogate in a span
name failed the whole OTLP export batch, and the id is as long as the body allows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from agentguard import steps
from agentguard.aos import METHODS
from agentguard.guardian import GuardianClient
from agentguard.guardian._tracing import MAX_RECORDED_ID
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel

MARK = "EVIL-"

# Any code point: lone surrogates (what JSON's "\ud800" reads as), NUL and other control characters included.
hostile_text = st.text(st.characters(exclude_categories=()), max_size=40)


@pytest.fixture(scope="module")
def otel() -> Otel:
    return Otel()


@pytest.fixture(scope="module")
def guardian(otel: Otel) -> Iterator[RunningServer]:
    app = create_app(parse_rules("default_decision: allow"), tracer_provider=otel.tracer_provider)
    with serve_in_thread(app) as server:
        yield server


def _server_span(otel: Otel, guardian: RunningServer, body: dict[str, object]) -> ReadableSpan:
    """The SERVER span of one request (ended, and so exported, before the answer is sent)."""
    otel.exporter.clear()
    # ensure_ascii: a lone surrogate travels as its \\u escape, as a hostile client would send it.
    httpx.post(guardian.url, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    (span,) = [s for s in otel.spans() if s.kind is SpanKind.SERVER]
    return span


def _assert_exportable(span: ReadableSpan) -> dict[str, Any]:
    assert encode_spans([span]).SerializeToString()
    attributes = dict(span.attributes or {})
    for text in (span.name, *(str(v) for v in attributes.values())):
        text.encode()
        assert MARK not in text
    return attributes


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(method=hostile_text, request_id=st.one_of(hostile_text, st.integers(-(2**53) + 1, 2**53 - 1)))
def test_a_method_aos_does_not_have_names_no_server_span(
    otel: Otel, guardian: RunningServer, method: str, request_id: str | int
) -> None:
    span = _server_span(
        otel, guardian, {"jsonrpc": "2.0", "id": request_id, "method": MARK + method, "params": {}}
    )
    attributes = _assert_exportable(span)
    assert span.name == "aos other"
    assert attributes["rpc.method"] == "other"
    assert len(str(attributes["rpc.jsonrpc.request_id"])) <= MAX_RECORDED_ID + 1


@pytest.mark.parametrize("method", sorted(METHODS))
def test_an_aos_method_still_names_the_server_span(otel: Otel, guardian: RunningServer, method: str) -> None:
    span = _server_span(otel, guardian, {"jsonrpc": "2.0", "id": "r-1", "method": method, "params": {}})
    assert span.name == f"aos {method}"
    assert dict(span.attributes or {})["rpc.method"] == method
    assert dict(span.attributes or {})["rpc.jsonrpc.request_id"] == "r-1"


def test_a_long_request_id_is_recorded_cut(otel: Otel, guardian: RunningServer) -> None:
    """An id of 500,000 characters (the body may be a megabyte) is recorded as its first characters."""
    request_id = "I" * 500_000 + "\ud800"
    span = _server_span(otel, guardian, {"jsonrpc": "2.0", "id": request_id, "method": "ping"})
    attributes = _assert_exportable(span)
    assert span.name == "aos ping"
    assert attributes["rpc.jsonrpc.request_id"] == "I" * MAX_RECORDED_ID + "\u2026"


def test_a_peers_a2a_method_names_no_client_span() -> None:
    """A host relaying a peer's A2A message passes the method the peer wrote; the step goes to the guardian
    in a CLIENT span, which was named after that method."""
    otel = Otel()
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body["method"])
        result = {"decision": "allow", "message": "ok"}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": result})

    client = GuardianClient(
        "http://guardian.test/aos",
        transport=httpx.MockTransport(answer),
        tracer_provider=otel.tracer_provider,
    )
    guard = otel.guard(spec_text("capabilities: {}"), guardian=client)
    with client, guard.engagement() as eng:
        eng.report(steps.A2A(a2a_method=MARK + "\ud800\x00", payload={}))  # type: ignore[arg-type]
        eng.report(steps.A2A(a2a_method="message/send", payload={}))
    assert seen == [MARK + "\ud800\x00", "message/send"]  # the guardian is still told the peer's method
    client_spans = [s for s in otel.spans() if s.kind is SpanKind.CLIENT]
    assert [s.name for s in client_spans] == ["other", "message/send"]
    for span in client_spans:
        _assert_exportable(span)
