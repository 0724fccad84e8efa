"""A tool name no capability allows, and any string a model, a peer or a host writes, as telemetry records it.

A call's name is the caller's, and an adapter's caller is often the model: a name the spec does not know is
recorded as ``_unknown`` (in the span's name, ``gen_ai.tool.name`` and the reasons that quote it), whether the
capability check denies it, lets it through (``unknown_capability``) or refuses it as reserved. Every other
string (ids, reasons, a model's name) is recorded as valid UTF-8: the OTLP encoder fails a whole batch on one
lone surrogate in a span's name or status, and drops an attribute that carries one.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

from agentguard import CapabilityDenied, Guard, ReviewDenied
from agentguard.policy import Approval, ReviewRequest
from agentguard.telemetry import GuardTelemetry
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel

SPEC = spec_text(
    """
    capabilities:
      forward: {}
      refund:
        input_restriction:
          require_review: manager
    """
)

MARK = "EVIL-"

# Any code point: lone surrogates (what JSON's "\ud800" reads as), NUL and other control characters included.
hostile_text = st.text(st.characters(exclude_categories=()), max_size=40)


def _strings(span: ReadableSpan) -> list[str]:
    """Every string a span carries: its name, status, attributes and events' attributes."""
    found = [span.name, span.status.description or ""]
    for attributes in (span.attributes, *(e.attributes for e in span.events)):
        found.extend(str(v) for v in (attributes or {}).values())
    return found


def _exported(otel: Otel) -> list[ReadableSpan]:
    """The recorded spans, after checking that the OTLP encoder takes them all in one batch."""
    spans = otel.spans()
    assert encode_spans(spans).SerializeToString()
    for span in spans:
        for text in _strings(span):
            text.encode()  # valid UTF-8, which is what an OTLP collector is sent
    return spans


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tail=hostile_text,
    mode=st.sampled_from(["deny", "allow", "observe"]),
    reserved=st.booleans(),
)
def test_a_tool_name_no_capability_allows_is_never_recorded(tail: str, mode: str, reserved: bool) -> None:
    """A tool the spec allows is still named: its span starts as ``execute_tool _unknown`` and is named when
    the capability decision allows it, so the tool's own spans nest in a span that says which tool it is."""
    otel = Otel()
    inside: list[str] = []

    def forward() -> str:
        span = trace.get_current_span()
        inside.append(span.name if isinstance(span, ReadableSpan) else "?")
        return "forwarded"

    try:
        name = ("_" if reserved else "") + MARK + tail
        guard = otel.guard(SPEC, unknown_capability=mode)
        with guard.engagement():
            try:
                guard.call(name, {}, lambda: "ran")
            except CapabilityDenied:
                assert reserved or mode == "deny"
            guard.call("forward", {}, forward)
        assert inside == ["execute_tool forward"]
        spans = _exported(otel)
        assert sorted(s.name for s in spans if s.name.startswith("execute_tool")) == [
            "execute_tool _unknown",
            "execute_tool forward",
        ]
        unknown = otel.span("execute_tool _unknown")
        assert dict(unknown.attributes or {})["gen_ai.tool.name"] == "_unknown"
        assert not [t for s in spans for t in _strings(s) if MARK in t]
        for metric in ("agentguard.decisions", "agentguard.check.duration"):
            assert not [a for a, _ in otel.points(metric) if any(MARK in str(v) for v in a.values())]
    finally:
        otel.tracer_provider.shutdown()
        otel.meter_provider.shutdown()


def test_no_string_a_model_or_a_peer_writes_keeps_a_batch_from_being_exported(otel: Otel) -> None:
    """A call id, an engagement id, a reviewer's reason, a model's name and a tool's error with lone
    surrogates: every span is encodable, and says what it said with U+FFFD in their place."""

    def manager(request: ReviewRequest) -> Approval:
        return Approval(approved=False, reason="refused \ud800 here")

    guard = otel.guard(SPEC, capture_content=True)
    guard.add_reviewer("manager", manager)

    def failing() -> Any:
        raise ValueError("boom \udfff")

    assert guard.telemetry is not None
    with guard.engagement(engagement_id="eng-\ud800") as eng:
        with guard.telemetry.chat_span(eng.state, "model-\ud800", provider="p\ud800"):
            pass
        with pytest.raises(ReviewDenied):
            guard.call("refund", {}, lambda: "refunded", call_id="call-\ud800")
        with pytest.raises(ValueError, match="boom"):
            guard.call("forward", {}, failing, call_id="call-\udbff")
    spans = _exported(otel)
    assert {s.name for s in spans} == {
        "invoke_agent test-agent",
        "chat model-\ufffd",
        "execute_tool refund",
        "execute_tool forward",
    }
    refund = otel.span("execute_tool refund")
    assert dict(refund.attributes or {})["gen_ai.tool.call.id"] == "call-\ufffd"
    assert "refused \ufffd here" in (refund.status.description or "")
    forward = otel.span("execute_tool forward")
    assert forward.status.description == "ValueError: boom \ufffd"
    (exception,) = [e for e in forward.events if e.name == "exception"]
    assert dict(exception.attributes or {})["exception.message"] == "boom \ufffd"


def test_an_agent_name_with_a_lone_surrogate_keeps_its_spans_and_its_metric_series(otel: Otel) -> None:
    """The agent's name is on every span and every metric point: the encoder drops an attribute it cannot
    encode, which merged every agent's series into one, and fails the batch of a span whose name carries it."""
    telemetry = GuardTelemetry(
        agent_name="agent-\ud800",
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )
    guard = Guard.from_yaml(SPEC, telemetry=telemetry, reviewers={"manager": lambda request: False})
    with guard.engagement():
        guard.call("forward", {}, lambda: "forwarded")
    assert {s.name for s in _exported(otel)} == {"invoke_agent agent-\ufffd", "execute_tool forward"}
    data = otel.reader.get_metrics_data()
    assert data is not None
    encoded = encode_metrics(data)
    agents = {
        a.value.string_value
        for r in encoded.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
        for p in (*m.sum.data_points, *m.histogram.data_points)
        for a in p.attributes
        if a.key == "gen_ai.agent.name"
    }
    assert agents == {"agent-\ufffd"}
