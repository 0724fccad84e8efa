"""Every field of the agent schema: types, defaults, required fields, unknown fields, strictness."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from agentguard.errors import SpecError
from agentguard.spec import (
    KIND,
    AgentSpec,
    Capability,
    Guardrail,
    Guardrails,
    Lifespan,
    Restriction,
    parse_spec,
)


def base(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "kind": KIND,
        "name": "support-agent",
        "description": "The agent helps.",
        "intent": "You help.",
        "owner": "team-a",
        "capabilities": {"lookup-order": None},
    }
    document.update(overrides)
    return document


def problems_of(document: dict[str, Any]) -> dict[str, str]:
    """Validate a document given as data (via YAML, as a user would write it); field -> reason."""
    with pytest.raises(SpecError) as caught:
        parse_spec(yaml.safe_dump(document, sort_keys=False))
    return {problem.field: problem.reason for problem in caught.value.problems}


def test_minimal_document_and_defaults(minimal: str) -> None:
    spec = parse_spec(minimal)
    assert spec.kind == "openagentspec:v1/agent"
    assert spec.name == "minimal-agent"
    assert spec.description == "The agent looks up orders."
    assert spec.intent == "You look up orders."
    assert spec.owner == "team-a"
    assert spec.guardrails is None
    assert spec.exposes is None
    assert spec.lifespan is None
    assert spec.capabilities == {"lookup-order": Capability()}


def test_capability_defaults() -> None:
    capability = Capability()
    assert capability.collect_results is True
    assert capability.user_identity is True
    assert capability.static_identity is None
    assert capability.input_restriction is None
    assert capability.output_restriction is None


def test_null_and_empty_capability_are_the_same() -> None:
    spec = AgentSpec.model_validate(base(capabilities={"a": None, "b": {}}))
    assert spec.capabilities["a"] == spec.capabilities["b"] == Capability()


def test_every_field_set() -> None:
    text = textwrap.dedent(
        """\
        kind: openagentspec:v1/agent
        name: full.agent-1
        description: The agent does everything.
        intent: You do everything.
        owner: owner-1
        capabilities:
          send-email:
            collect_results: false
            user_identity: false
            static_identity: mailer
            input_restriction:
              require_review: supervisor
              assertion: 'true'
            output_restriction:
              require_review: oagent://reviewer
              assertion: 'false'
          oagent://helper: {}
          oagent://agents.example.com/team/remote-helper: {}
        guardrails:
          input: {tool_name: pii-check, assertion: output.ok}
          output: {tool_name: toxicity-check, assertion: '!output.toxic'}
        exposes:
          total: history._total
        lifespan:
          retain_memory: false
          short_circuit: 1
        """
    )
    spec = parse_spec(text)
    assert spec.capabilities["send-email"] == Capability(
        collect_results=False,
        user_identity=False,
        static_identity="mailer",
        input_restriction=Restriction(require_review="supervisor", assertion="true"),
        output_restriction=Restriction(require_review="oagent://reviewer", assertion="false"),
    )
    assert list(spec.capabilities) == [
        "send-email",
        "oagent://helper",
        "oagent://agents.example.com/team/remote-helper",
    ]
    assert spec.guardrails == Guardrails(
        input=Guardrail(tool_name="pii-check", assertion="output.ok"),
        output=Guardrail(tool_name="toxicity-check", assertion="!output.toxic"),
    )
    assert spec.exposes == {"total": "history._total"}
    assert spec.lifespan == Lifespan(retain_memory=False, short_circuit=1)


def test_restriction_fields_are_optional() -> None:
    assert Restriction() == Restriction(require_review=None, assertion=None)


def test_lifespan_defaults() -> None:
    assert Lifespan() == Lifespan(retain_memory=True, short_circuit=None)


def test_guardrails_may_hold_one_side() -> None:
    spec = AgentSpec.model_validate(base(guardrails={"output": {"tool_name": "t", "assertion": "true"}}))
    assert spec.guardrails is not None
    assert spec.guardrails.input is None


def test_empty_capabilities_are_allowed() -> None:
    assert AgentSpec.model_validate(base(capabilities={})).capabilities == {}


@pytest.mark.parametrize("field", ["kind", "name", "description", "intent", "owner", "capabilities"])
def test_required_top_level_fields(field: str) -> None:
    document = base()
    del document[field]
    assert problems_of(document) == {field: "required field is missing"}


@pytest.mark.parametrize("field", ["tool_name", "assertion"])
def test_guardrail_fields_are_required(field: str) -> None:
    guardrail = {"tool_name": "pii-check", "assertion": "true"}
    del guardrail[field]
    assert problems_of(base(guardrails={"input": guardrail})) == {
        f"guardrails.input.{field}": "required field is missing"
    }


def test_kind_must_be_exact() -> None:
    assert problems_of(base(kind="openagentspec:v2/agent")) == {
        "kind": "must be 'openagentspec:v1/agent', not 'openagentspec:v2/agent'"
    }


@pytest.mark.parametrize("field", ["description", "intent", "owner"])
def test_text_fields_must_not_be_blank(field: str) -> None:
    assert problems_of(base(**{field: "  "})) == {field: "must not be empty"}


def test_agent_name_follows_the_name_rule() -> None:
    assert problems_of(base(name="Support_Agent")) == {
        "name": "invalid name 'Support_Agent': may contain only lowercase letters, digits, '-' and '.', "
        "not 'S' (names are lowercase)"
    }


def test_guardrail_tool_name_follows_the_name_rule() -> None:
    found = problems_of(base(guardrails={"input": {"tool_name": "-pii", "assertion": "true"}}))
    assert list(found) == ["guardrails.input.tool_name"]
    assert "must start with a lowercase letter or digit" in found["guardrails.input.tool_name"]


@pytest.mark.parametrize(
    "key", ["Send", "send_email", "oagent://", "http://example.com/x", "oagent://example.com//x", "-x"]
)
def test_capability_keys_are_references(key: str) -> None:
    found = problems_of(base(capabilities={key: None}))
    assert list(found) == [f"capabilities.{key}"]
    assert found[f"capabilities.{key}"].startswith(f"key {key!r} is not a valid reference: ")


@pytest.mark.parametrize(
    ("document", "field", "suggestion"),
    [
        (base(nmae="x"), "nmae", "name"),
        (
            base(capabilities={"a": {"colect_results": True}}),
            "capabilities.a.colect_results",
            "collect_results",
        ),
        (
            base(capabilities={"a": {"input_restriction": {"asertion": "true"}}}),
            "capabilities.a.input_restriction.asertion",
            "assertion",
        ),
        (
            base(guardrails={"input": {"tool_name": "t", "assertion": "true", "toolname": "x"}}),
            "guardrails.input.toolname",
            "tool_name",
        ),
        (base(guardrails={"inputs": None}), "guardrails.inputs", "input"),
        (base(lifespan={"short_circut": 2}), "lifespan.short_circut", "short_circuit"),
    ],
)
def test_unknown_fields_are_named_with_a_suggestion(
    document: dict[str, Any], field: str, suggestion: str
) -> None:
    name = field.rsplit(".", 1)[-1]
    assert problems_of(document) == {field: f"unknown field {name!r} (did you mean {suggestion!r}?)"}


def test_unknown_field_without_a_close_match() -> None:
    assert problems_of(base(zzz=1)) == {"zzz": "unknown field 'zzz'"}


@pytest.mark.parametrize(
    ("document", "field", "reason"),
    [
        (
            base(capabilities={"a": {"collect_results": "false"}}),
            "capabilities.a.collect_results",
            "true or false",
        ),
        (base(capabilities={"a": {"user_identity": 1}}), "capabilities.a.user_identity", "true or false"),
        (base(lifespan={"short_circuit": 2.0}), "lifespan.short_circuit", "an integer"),
        (base(lifespan={"short_circuit": True}), "lifespan.short_circuit", "an integer"),
        (base(owner=42), "owner", "a string"),
        (base(capabilities=["a", "b"]), "capabilities", "a mapping"),
        (base(guardrails={"input": "pii-check"}), "guardrails.input", "a mapping"),
        (base(exposes={"total": 3}), "exposes.total", "a string"),
    ],
)
def test_values_are_strictly_typed(document: dict[str, Any], field: str, reason: str) -> None:
    found = problems_of(document)
    assert list(found) == [field]
    assert found[field].startswith(f"expected {reason}, got ")


def test_short_circuit_must_be_positive() -> None:
    assert problems_of(base(lifespan={"short_circuit": 0})) == {
        "lifespan.short_circuit": "must be at least 1, not 0"
    }


def test_models_are_frozen() -> None:
    spec = AgentSpec.model_validate(base())
    with pytest.raises(ValidationError, match="frozen"):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        spec.capabilities["lookup-order"].collect_results = False  # type: ignore[misc]


def test_models_validate_from_python_too() -> None:
    with pytest.raises(ValidationError) as caught:
        AgentSpec.model_validate(base(name="Bad", extra=1))
    assert {error["loc"] for error in caught.value.errors()} == {("name",), ("extra",)}
