"""One trace from the agent to the guardian and back: CLIENT span per request, W3C traceparent, SERVER span."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from agentguard import GuardianDenied
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel, decision_events, is_child, wait_until

SPEC = spec_text(
    """
    capabilities:
      lookup: {}
      shell: {}
    """
)

RULES = """
default_decision: allow
rules:
  - name: no-shell
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "shell"
    decision: deny
    message: No shell access
"""


@pytest.fixture
def guardian(otel: Otel) -> Iterator[RunningServer]:
    """The reference guardian on 127.0.0.1, recording its SERVER spans to the test's provider."""
    with serve_in_thread(create_app(parse_rules(RULES), tracer_provider=otel.tracer_provider)) as server:
        yield server


def _server_span_of(otel: Otel, client: ReadableSpan) -> ReadableSpan:
    """The guardian's span for one client request (ended on the server's thread, so maybe a little later)."""
    name = f"aos {dict(client.attributes or {})['rpc.method']}"
    assert client.context is not None
    span_id = client.context.span_id

    def children() -> list[ReadableSpan]:
        return [s for s in otel.named(name) if s.parent is not None and s.parent.span_id == span_id]

    wait_until(lambda: bool(children()))
    (child,) = children()
    return child


def test_the_guardian_continues_the_agents_trace(otel: Otel, guardian: RunningServer) -> None:
    client = GuardianClient(guardian.url, tracer_provider=otel.tracer_provider)
    guard = otel.guard(SPEC, guardian=client)
    lookup = guard.tool(name="lookup")(lambda order_id: "shipped")
    shell = guard.tool(name="shell")(lambda cmd: "")
    with client, guard.engagement(engagement_id="eng-7"):
        assert lookup(order_id="A-1") == "shipped"
        with pytest.raises(GuardianDenied):
            shell(cmd="ls")

    turn = otel.span("invoke_agent test-agent")
    step = otel.span("execute_tool lookup")
    request, result = sorted(
        (s for s in otel.spans() if s.kind is SpanKind.CLIENT and is_child(s, step)),
        key=lambda s: s.start_time or 0,
    )
    assert is_child(step, turn)
    for client_span, method in ((request, "steps/toolCallRequest"), (result, "steps/toolCallResult")):
        attributes = dict(client_span.attributes or {})
        assert client_span.name == method
        assert attributes["rpc.system"] == "jsonrpc"
        assert attributes["rpc.method"] == method
        assert attributes["server.address"] == "127.0.0.1"
        assert attributes["server.port"] == httpx.URL(guardian.url).port
        assert attributes["http.response.status_code"] == 200
        assert str(attributes["rpc.jsonrpc.request_id"]).startswith("ag-")
        server_span = _server_span_of(otel, client_span)
        assert server_span.kind is SpanKind.SERVER
        assert server_span.context is not None
        assert turn.context is not None
        assert server_span.context.trace_id == turn.context.trace_id
        server_attributes = dict(server_span.attributes or {})
        assert server_attributes["rpc.method"] == method
        assert server_attributes["rpc.jsonrpc.request_id"] == attributes["rpc.jsonrpc.request_id"]
        assert server_attributes["agentguard.guardian.decision"] == "allow"

    denied = otel.span("execute_tool shell")
    (denied_request,) = [s for s in otel.spans() if s.kind is SpanKind.CLIENT and is_child(s, denied)]
    assert (
        dict(_server_span_of(otel, denied_request).attributes or {})["agentguard.guardian.decision"] == "deny"
    )
    assert dict(denied.attributes or {})["agentguard.denied.rule"] == "guardian"
    assert denied.status.status_code is StatusCode.ERROR
    guardian_event = decision_events(denied)[-1]
    assert guardian_event["agentguard.decision.rule"] == "guardian"
    assert guardian_event["agentguard.decision.reason"] == "No shell access"


async def test_async_steps_carry_the_trace_too(otel: Otel, guardian: RunningServer) -> None:
    client = GuardianClient(guardian.url, tracer_provider=otel.tracer_provider)
    guard = otel.guard(SPEC, guardian=client)

    @guard.tool
    async def lookup(order_id: str) -> str:
        return "shipped"

    async with client, guard.engagement():
        assert await lookup(order_id="A-1") == "shipped"
    step = otel.span("execute_tool lookup")
    clients = [s for s in otel.spans() if s.kind is SpanKind.CLIENT]
    assert len(clients) == 2
    assert all(is_child(s, step) for s in clients)
    assert all(is_child(_server_span_of(otel, s), s) for s in clients)


def test_observed_steps_are_traced_from_where_they_were_submitted(
    otel: Otel, guardian: RunningServer
) -> None:
    client = GuardianClient(guardian.url, mode="observe", tracer_provider=otel.tracer_provider)
    guard = otel.guard(SPEC, guardian=client)
    lookup = guard.tool(name="lookup")(lambda order_id: "shipped")
    with client, guard.engagement():
        assert lookup(order_id="A-1") == "shipped"
    step = otel.span("execute_tool lookup")
    clients = otel.wait_for("steps/toolCallRequest") + otel.wait_for("steps/toolCallResult")
    # Sent by the delivery thread after the step ended, yet children of the step: the context of submit().
    assert all(is_child(s, step) for s in clients)
    assert all(is_child(_server_span_of(otel, s), s) for s in clients)
    assert {s.kind for s in clients} == {SpanKind.CLIENT}


def test_every_request_carries_the_w3c_traceparent(otel: Otel) -> None:
    seen: list[tuple[str, str | None]] = []
    sent = threading.Event()

    def guardian(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((body["method"], request.headers.get("traceparent")))
        if len(seen) == 2:
            sent.set()
        result = {"decision": "allow", "message": "ok"}
        if body["method"] == "ping":
            result = {"status": "connected", "version": "1", "timestamp": "2025-01-01T00:00:00Z"}
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": result})

    client = GuardianClient(
        "http://guardian.test/aos",
        ping_on_start=True,
        transport=httpx.MockTransport(guardian),
        tracer_provider=otel.tracer_provider,
    )
    guard = otel.guard(SPEC, guardian=client)
    lookup = guard.tool(name="lookup")(lambda order_id: "shipped")
    with client, guard.engagement():
        lookup(order_id="A-1")
    wait_until(sent.is_set)
    ping, request, _result = (
        s for s in sorted(otel.spans(), key=lambda s: s.start_time or 0) if s.kind is SpanKind.CLIENT
    )
    assert ping.name == "ping"
    assert "rpc.jsonrpc.request_id" not in dict(ping.attributes or {})
    assert request.name == "steps/toolCallRequest"
    assert [method for method, _ in seen[:2]] == ["ping", "steps/toolCallRequest"]
    for (_, header), span in zip(seen[:2], (ping, request), strict=True):
        assert span.context is not None
        assert header is not None
        assert header.startswith(f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")


def test_a_failed_request_is_an_error_client_span(otel: Otel) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    client = GuardianClient(
        "http://guardian.test/aos",
        on_failure="allow",
        transport=httpx.MockTransport(down),
        tracer_provider=otel.tracer_provider,
    )
    guard = otel.guard(SPEC, guardian=client)
    lookup = guard.tool(name="lookup")(lambda order_id: "shipped")
    with client, guard.engagement():
        assert lookup(order_id="A-1") == "shipped"
    request = otel.span("steps/toolCallRequest")
    assert request.status.status_code is StatusCode.ERROR
    assert dict(request.attributes or {})["error.type"] == "ConnectError"
    step_events = decision_events(otel.span("execute_tool lookup"))
    assert {"agentguard.decision.rule": "guardian", "agentguard.decision.outcome": "no-decision"}.items() <= (
        step_events[1].items()
    )
