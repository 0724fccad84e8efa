"""What a schema check's reason quotes of a value a model wrote: bounded and escaped, or, for a result, nothing.

A schema check's reason is the caller's error and the recorded decision alike (decisions, telemetry, with
content capture off). A model invents argument names at will: quoted as they came, one of megabytes, with
NUL, newlines or a lone surrogate, went into every recorded reason (a lone surrogate in a span event's
attribute is dropped by the OTLP encoder, a newline forges log lines). Names are quoted as ``repr`` does and
cut to 40 characters, so the model can still be told which name was wrong. A result's check quotes nothing of
the result: it is withheld when it fails, and its reason reaches the caller, often the model, all the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from agentguard import Guard, RuleViolation
from agentguard.formats import JSONSchema, parse_descriptor
from agentguard.record import Outcome
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel

MARK = "EVIL-"
LONGEST = 600  # a reason with three bounded messages, the tool's name and the descriptor's source

AGENT = """
component_type: Agent
id: shop
name: shop
system_prompt: You look orders up.
llm_config: {component_type: VllmConfig, id: llm, name: llm, model_id: m, url: "http://llm.test"}
tools:
  - component_type: ServerTool
    id: lookup-order-tool
    name: lookup_order
    inputs:
      - {title: order_id, type: string}
      - {title: extra, type: object, additionalProperties: {type: string}, default: {}}
    outputs:
      - title: order
        type: object
        properties:
          status: {type: string, enum: [open, shipped]}
          total: {type: integer, maximum: 100}
        additionalProperties: false
"""

# Any code point: lone surrogates, NUL and other control characters included; sometimes very long.
hostile_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.integers(1, 200_000).map(lambda n: "\ud800\n\x00" * n),
)


def _guard(result: Any = None) -> tuple[Guard, Otel]:
    otel = Otel()
    guard = otel.guard(spec_text("capabilities:\n  lookup-order: {}\n"))
    parse_descriptor(AGENT, names={"lookup_order": "lookup-order"}).apply(guard)

    def lookup(**arguments: Any) -> Any:
        return result

    guard.tool(name="lookup-order")(lookup)
    return guard, otel


def _assert_quotes_nothing_raw(reason: str) -> None:
    """Bounded, printable (control characters and surrogates escaped) and so valid UTF-8."""
    assert len(reason) <= LONGEST, len(reason)
    assert reason.isprintable(), reason
    reason.encode()


def _denied(guard: Guard, otel: Otel, arguments: dict[str, Any]) -> tuple[str, str]:
    """The error told to the caller and the reason recorded (its decision, and its span event)."""
    with guard.engagement() as eng, pytest.raises(RuleViolation) as info:
        guard.call("lookup-order", arguments)
    (denied,) = [d for d in eng.decisions if d.outcome is Outcome.DENY]
    spans = otel.spans()
    assert encode_spans(spans).SerializeToString()
    recorded = [
        str(event.attributes["agentguard.decision.reason"])
        for span in spans
        for event in span.events
        if event.attributes and event.attributes.get("agentguard.decision.outcome") == "deny"
    ]
    assert recorded == [denied.reason]
    return str(info.value), denied.reason


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=hostile_text)
def test_a_made_up_argument_name_is_quoted_bounded_and_escaped(name: str) -> None:
    guard, otel = _guard()
    told, recorded = _denied(guard, otel, {"order_id": "A-1", MARK + name: 1})
    for reason in (told, recorded):
        _assert_quotes_nothing_raw(reason)
        assert any(f": {quote}{MARK}" in reason for quote in ("", "'", '"'))  # still told which name
        assert "not a declared name" in reason


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=hostile_text)
def test_a_made_up_member_name_under_additional_properties_is_bounded(name: str) -> None:
    """``additionalProperties: {schema}``: the path of a failing member is built from its name."""
    guard, otel = _guard()
    told, recorded = _denied(guard, otel, {"order_id": "A-1", "extra": {MARK + name: 5}})
    for reason in (told, recorded):
        _assert_quotes_nothing_raw(reason)
        assert "expected a string, got the number 5" in reason


def test_an_unexpected_member_is_quoted_bounded_and_escaped() -> None:
    schema = JSONSchema({"type": "object", "additionalProperties": False})
    message = schema.check({MARK + "\x1b[2J\ud800" * 100_000: 1}, "the payload").message
    _assert_quotes_nothing_raw(message)
    shown = (MARK + "\x1b[2J\ud800" * 8)[:37] + "..."
    assert message.endswith(f"value: unexpected member {shown!r}")


def test_a_deep_path_and_a_long_number_are_bounded() -> None:
    """Each step of a path is bounded; their number is the value's nesting (up to 100 levels)."""
    value: Any = "x"
    for _ in range(100):
        value = {"k" * 39 + "\n": value}
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(100):
        schema = {"type": "object", "additionalProperties": schema}
    message = JSONSchema(schema).check(value, "the payload").message
    _assert_quotes_nothing_raw(message)
    assert message.endswith("expected an integer, got the string 'x'")
    big = JSONSchema({"maximum": 5}).check(10**4000, "the payload").message
    _assert_quotes_nothing_raw(big)
    assert "the number 1000000000000000000000000000000000000... is greater than 5" in big


def test_a_result_that_fails_its_schema_is_quoted_nowhere() -> None:
    """The result is withheld; the reason names where and why, never its values or member names."""
    secret = MARK + "4111-1111-1111-1111"
    result = {"status": secret, "total": 10**30 + 7, secret: "x", "\ud800" * 10: 1}
    guard, otel = _guard(result)
    told, recorded = _denied(guard, otel, {"order_id": "A-1"})
    for reason in (told, recorded):
        _assert_quotes_nothing_raw(reason)
        assert MARK not in reason
        assert "4111" not in reason
        assert "1000000000000000000000000000007" not in reason
        assert "status: a string is not one of" in reason
        assert "total: a number is greater than 100" in reason
        assert "value: unexpected member (and 1 more)" in reason
