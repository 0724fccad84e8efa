"""Privacy: content is recorded only when asked for, and a withheld output never is.

Each test marks its content with a unique string and looks for it in every span, attribute and event
exported (client and server spans of the guardian included), not only where it is expected.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.trace import StatusCode

from agentguard import Approval, Guard, GuardianDenied, RestrictionViolation, ReviewDenied, ReviewRequest
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from agentguard.telemetry import CAPTURE_CONTENT_ENV, GuardTelemetry
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel

SPEC = spec_text(
    """
    capabilities:
      lookup:
        output_restriction:
          assertion: '!recent["lookup"].outputs.contains("SECRET")'
      approve:
        output_restriction:
          require_review: auditor
      fetch: {}
    """
)


def _lookup(otel: Otel, **options: object) -> None:
    guard = otel.guard(SPEC, **options)
    lookup = guard.tool(name="lookup")(lambda query: f"result for {query}")
    with guard.engagement() as eng:
        lookup(query="INPUT-MARK")
        eng.report_message("user", "MESSAGE-MARK")


def test_no_content_is_recorded_by_default(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    _lookup(otel)
    text = otel.text()
    assert "INPUT-MARK" not in text
    assert "MESSAGE-MARK" not in text
    attributes = dict(otel.span("execute_tool lookup").attributes or {})
    assert "gen_ai.tool.call.arguments" not in attributes
    assert "gen_ai.tool.call.result" not in attributes


def test_content_is_recorded_when_asked_for(otel: Otel) -> None:
    _lookup(otel, capture_content=True)
    attributes = dict(otel.span("execute_tool lookup").attributes or {})
    assert attributes["gen_ai.tool.call.arguments"] == '{"query": "INPUT-MARK"}'
    assert attributes["gen_ai.tool.call.result"] == "result for INPUT-MARK"
    message = dict(otel.span("apply_guardrail llm_input").attributes or {})
    assert message["gen_ai.security.content.input.value"] == "MESSAGE-MARK"


def test_content_with_a_lone_surrogate_is_exported_whole(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    """JSON's "\\ud800" reads as a lone surrogate, which UTF-8 cannot carry: the OTLP exporter dropped each
    such attribute (logging "Failed to encode key"). It is recorded with U+FFFD in its place."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    guard = otel.guard(SPEC, capture_content=True)
    lookup = guard.tool(name="lookup")(lambda query: f"result for {query}")
    with guard.engagement() as eng:
        lookup(query="A\ud800B")
        eng.report_message("user", "C\udfffD")
    attributes = dict(otel.span("execute_tool lookup").attributes or {})
    assert attributes["gen_ai.tool.call.arguments"] == '{"query": "A\ufffdB"}'
    assert attributes["gen_ai.tool.call.result"] == "result for A\ufffdB"
    message = dict(otel.span("apply_guardrail llm_input").attributes or {})
    assert message["gen_ai.security.content.input.value"] == "C\ufffdD"
    encoded = encode_spans(otel.spans()).SerializeToString()
    assert "A\ufffdB".encode() in encoded
    assert "Failed to encode" not in caplog.text


@pytest.mark.parametrize(
    ("value", "captured"), [("true", True), ("TRUE", True), ("false", False), ("", False)]
)
def test_the_environment_variable_turns_capture_on(
    otel: Otel, monkeypatch: pytest.MonkeyPatch, value: str, captured: bool
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, value)
    _lookup(otel)
    assert ("INPUT-MARK" in otel.text()) is captured


def test_an_explicit_no_wins_over_the_environment(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    _lookup(otel, capture_content=False)
    assert "INPUT-MARK" not in otel.text()


def test_a_telemetry_object_carries_its_own_capture_flag(otel: Otel) -> None:
    telemetry = GuardTelemetry(capture_content=True, tracer_provider=otel.tracer_provider)
    guard = Guard.from_yaml(SPEC, telemetry=telemetry, reviewers={"auditor": lambda request: False})
    lookup = guard.tool(name="lookup")(lambda query: "found")
    with guard.engagement():
        lookup(query="INPUT-MARK")
    attributes = dict(otel.span("execute_tool lookup").attributes or {})
    assert attributes["gen_ai.tool.call.arguments"] == '{"query": "INPUT-MARK"}'
    assert attributes["gen_ai.agent.name"] == "test-agent"  # filled in by the Guard


def test_a_withheld_output_is_never_recorded(otel: Otel) -> None:
    guard = otel.guard(SPEC, capture_content=True)
    lookup = guard.tool(name="lookup")(lambda query: "SECRET-OUTPUT")
    with guard.engagement(), pytest.raises(RestrictionViolation):
        lookup(query="INPUT-MARK")
    span = otel.span("execute_tool lookup")
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.tool.call.arguments"] == '{"query": "INPUT-MARK"}'  # the input is not withheld
    assert "gen_ai.tool.call.result" not in attributes
    assert "SECRET-OUTPUT" not in otel.text()
    assert span.status.status_code is StatusCode.ERROR


def test_an_output_rejected_in_review_is_never_recorded(otel: Otel) -> None:
    seen: list[object] = []

    def auditor(request: ReviewRequest) -> Approval:
        seen.append(request.outputs)
        return Approval(False, "not for the model", "auditor")

    guard = otel.guard(SPEC, capture_content=True, reviewers={"auditor": auditor})
    approve = guard.tool(name="approve")(lambda: "REVIEWED-OUTPUT")
    with guard.engagement(), pytest.raises(ReviewDenied):
        approve()
    assert seen == ["REVIEWED-OUTPUT"]  # the reviewer saw it; telemetry does not
    assert "REVIEWED-OUTPUT" not in otel.text()


def test_a_failed_tools_message_is_content(otel: Otel) -> None:
    guard = otel.guard(SPEC, capture_content=True)

    @guard.tool(name="fetch")
    def fetch() -> None:
        raise ValueError("ERROR-MARK")

    with guard.engagement(), pytest.raises(ValueError, match="ERROR-MARK"):
        fetch()
    span = otel.span("execute_tool fetch")
    assert span.status.description == "ValueError: ERROR-MARK"
    assert [e.name for e in span.events][-1] == "exception"
    assert "gen_ai.tool.call.result" not in dict(span.attributes or {})


@pytest.fixture
def guardian(otel: Otel) -> Iterator[RunningServer]:
    rules = """
    rules:
      - name: no-secrets
        methods: [steps/toolCallResult]
        when: params.result.outputs.exists(p, p.text.contains("SECRET"))
        decision: deny
        message: Result carries a secret
    """
    with serve_in_thread(create_app(parse_rules(rules), tracer_provider=otel.tracer_provider)) as server:
        yield server


def test_an_output_the_guardian_denies_is_never_recorded(otel: Otel, guardian: RunningServer) -> None:
    client = GuardianClient(guardian.url, tracer_provider=otel.tracer_provider)
    guard = otel.guard(SPEC, capture_content=True, guardian=client)
    fetch = guard.tool(name="fetch")(lambda: "SECRET-FROM-GUARDIAN")
    with client, guard.engagement(), pytest.raises(GuardianDenied):
        fetch()
    otel.wait_for("aos steps/toolCallResult")
    assert "SECRET-FROM-GUARDIAN" not in otel.text()
    attributes = dict(otel.span("execute_tool fetch").attributes or {})
    assert attributes["agentguard.denied.rule"] == "guardian"
    assert attributes["gen_ai.tool.call.arguments"] == "{}"
