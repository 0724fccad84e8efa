"""What a model, a tool or a peer chooses never decides what telemetry records beyond its own content.

A guardian's ``modify`` of a message, or a ``deny`` of retrieved knowledge, means the original must not go
on: with content capture on it is not recorded either (only a tool call's inputs after the modification
are, which is what the tool got). A step kind the host passes through from a peer (an A2A method name) is
recorded only when it is one agentguard knows: it names spans and is an attribute of every metric point.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentguard import GuardianDenied, steps
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel

SPEC = spec_text(
    """
    capabilities:
      forward: {}
    """
)

RULES = """
default_decision: allow
rules:
  - name: reroute
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "forward"
    decision: modify
    message: Rerouted
    set:
      params.toolCallRequest.inputs: '[{"name": "to", "value": "ops@corp.com"}]'
  - name: polite
    methods: [steps/message]
    when: params.message.content.exists(p, p.text.contains("stupid"))
    decision: modify
    message: Made polite
    set:
      params.message.content: '[{"kind": "text", "text": "[removed]"}]'
  - name: no-secret-knowledge
    methods: [steps/knowledgeRetrieval]
    when: params.knowledgeStep.results.exists(r, r.content.contains("SECRET"))
    decision: deny
    message: Knowledge carries a secret
"""


@pytest.fixture
def guardian(otel: Otel) -> Iterator[GuardianClient]:
    with serve_in_thread(create_app(parse_rules(RULES))) as server, _client(server) as client:
        yield client


def _client(server: RunningServer) -> GuardianClient:
    return GuardianClient(server.url, timeout=5.0)


def test_the_original_of_a_modified_message_is_never_recorded(otel: Otel, guardian: GuardianClient) -> None:
    guard = otel.guard(SPEC, capture_content=True, guardian=guardian)
    with guard.engagement() as eng:
        assert eng.check_input("you are stupid, USER-ORIGINAL") == "[removed]"
        assert eng.check_output("stupid ANSWER-ORIGINAL") == "[removed]"
    assert "USER-ORIGINAL" not in otel.text()
    assert "ANSWER-ORIGINAL" not in otel.text()
    for name in ("apply_guardrail llm_input", "apply_guardrail llm_output"):
        attributes = dict(otel.span(name).attributes or {})
        assert attributes["gen_ai.security.decision.type"] == "modify"
        assert "gen_ai.security.content.input.value" not in attributes


def test_knowledge_the_guardian_denies_is_never_recorded(otel: Otel, guardian: GuardianClient) -> None:
    guard = otel.guard(SPEC, capture_content=True, guardian=guardian)
    with guard.engagement() as eng, pytest.raises(GuardianDenied):
        eng.report_knowledge_retrieval("q", [{"id": "kb1", "content": "SECRET-DOCUMENT"}])
    assert "SECRET-DOCUMENT" not in otel.text()
    attributes = dict(otel.span("apply_guardrail knowledge_result").attributes or {})
    assert attributes["gen_ai.security.decision.type"] == "deny"


def test_content_that_went_on_unchanged_is_still_recorded(otel: Otel, guardian: GuardianClient) -> None:
    guard = otel.guard(SPEC, capture_content=True, guardian=guardian)
    guard.tool(name="forward")(lambda to: "forwarded")
    with guard.engagement() as eng:
        eng.check_input("KIND-WORDS")
        guard.call("forward", {"to": "ORIGINAL-TO@corp.com"})
    message = dict(otel.span("apply_guardrail llm_input").attributes or {})
    assert message["gen_ai.security.content.input.value"] == "KIND-WORDS"
    tool = dict(otel.span("execute_tool forward").attributes or {})
    assert tool["gen_ai.tool.call.arguments"] == '{"to": "ops@corp.com"}'  # what the tool got
    assert "ORIGINAL-TO" not in otel.text()


def test_a_step_kind_agentguard_does_not_know_is_recorded_as_other(otel: Otel) -> None:
    """``A2A.a2a_method`` is a Literal only to the type checker: a host relaying a peer's method name
    passes whatever the peer wrote. Each distinct name was a new span name and a new metric series."""
    guard = otel.guard(SPEC)
    with guard.engagement() as eng:
        for n in range(3):
            eng.report(steps.A2A(a2a_method=f"PEER-CHOSEN-{n}", payload={}))  # type: ignore[arg-type]
        eng.report(steps.A2A(a2a_method="message/send", payload={}))
    assert "PEER-CHOSEN" not in otel.text()
    assert [s.name for s in otel.named("apply_guardrail other")] == ["apply_guardrail other"] * 3
    assert len(otel.named("apply_guardrail a2a_message")) == 1
    kinds = {a["agentguard.step.kind"] for a, _ in otel.points("agentguard.check.duration")}
    assert kinds == {"other", "message/send"}
