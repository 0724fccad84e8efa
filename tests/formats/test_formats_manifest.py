"""Agent Manifests: identity, input/output checks, interrupts as review gates, dependencies as sub-agents."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from agentguard import Guard, ReviewDenied, Rule, RuleViolation, SpecError, aos
from agentguard.formats import (
    REVIEW_INTERRUPT,
    REVIEW_INTERRUPT_TYPE,
    Descriptor,
    load_descriptor,
    parse_descriptor,
    with_review_interrupt,
)
from tests.formats.conftest import fixture

MAILER_SPEC = """\
kind: openagentspec:v1/agent
name: mailer
description: The agent writes e-mails.
intent: You write e-mails.
owner: mail-team@corp.example
capabilities:
  send-email:
    input_restriction:
      require_review: mail-approver
"""


def mailcomposer() -> Descriptor:
    return load_descriptor(fixture("mailcomposer.manifest.json"))


def test_identity_and_description() -> None:
    info = mailcomposer().agent_info
    assert info is not None
    assert (info.name, info.id, info.version) == (
        "org.agntcy.mailcomposer",
        "org.agntcy.mailcomposer@0.0.1",
        "0.0.1",
    )
    assert info.description is not None
    assert info.description.startswith("This agent is able to collect")
    assert info.metadata["acp"] == {
        "capabilities": {"threads": True, "interrupts": True, "callbacks": True},
        "deployments": ["source_code"],
        "dependencies": ["org.agntcy.sample-agent-2@0.0.1", "org.agntcy.sample-agent-3@0.0.1"],
        "interrupts": ["mail_send_approval"],
        "url": "https://github.com/agntcy/acp-spec/blob/main/docs/sample_acp_descriptors/mailcomposer.json",
    }


def test_input_and_output_are_checked_against_the_specs() -> None:
    descriptor = mailcomposer()
    assert descriptor.check_input({"message": "write to Bob"}).passed
    failed = descriptor.check_input({"message": 42})
    assert not failed.passed
    assert failed.message == (
        "schema check of the agent input failed: message: expected a string, got the number 42"
    )
    assert not descriptor.check_input({}).passed
    assert descriptor.check_output({"message": "Dear Bob"}).passed
    assert not descriptor.check_output("Dear Bob").passed


def test_the_applied_descriptor_is_a_valid_aos_agent() -> None:
    guard = Guard.from_file(fixture("agent.yaml"))
    mailcomposer().apply(guard)
    descriptor = guard.agent_descriptor()
    aos.Agent.model_validate(descriptor)
    assert descriptor["id"] == "org.agntcy.mailcomposer@0.0.1"


# ------------------------------------------------------------------------------------- dependencies


def test_dependencies_are_the_only_sub_agents(guard: Guard) -> None:
    problems = mailcomposer().apply(guard)
    # sample-agent-3 is a dependency the spec does not allow: reported (the allow-list will deny it)
    assert [(p.field, p.reason) for p in problems] == [
        ("dependencies", "sub-agent 'org.agntcy.sample-agent-3' is not a capability of the spec")
    ]
    with guard.engagement():
        assert (
            guard.call("org.agntcy.sample-agent-2", {"q": "hi"}, lambda q: "hello", kind="agent") == "hello"
        )
        with pytest.raises(RuleViolation) as info:
            guard.call("billing-agent", {"q": "hi"}, lambda q: "hello", kind="agent")
    assert info.value.rule is Rule.RULE
    assert info.value.rule_name == "manifest:dependencies"
    assert "'billing-agent' is not a dependency of the agent manifest" in str(info.value)


def test_no_dependencies_field_enforces_nothing(guard: Guard) -> None:
    data = json.loads(fixture("mailcomposer.manifest.json").read_text())
    del data["dependencies"]
    descriptor = parse_descriptor(json.dumps(data))
    assert descriptor.sub_agents is None
    descriptor.apply(guard)
    with guard.engagement():
        assert guard.call("billing-agent", {}, lambda: "ok", kind="agent") == "ok"


# ---------------------------------------------------------------------------------------- interrupts


def test_interrupts_are_read() -> None:
    (interrupt,) = mailcomposer().interrupts
    assert interrupt.interrupt_type == "mail_send_approval"
    assert interrupt.answers_reviews
    assert interrupt.check_payload({"subject": "s", "body": "b", "recipients": ["bob@corp.example"]}).passed
    assert not interrupt.check_payload({"subject": "s"}).passed
    assert interrupt.as_dict()["resume_payload"]["required"] == ["approved"]


def test_resume_bodies_become_approvals() -> None:
    (interrupt,) = mailcomposer().interrupts
    approval = interrupt.approval({"approved": True, "reason": "looks fine"}, approved_by="ann")
    assert (approval.approved, approval.reason, approval.approved_by) == (True, "looks fine", "ann")
    assert interrupt.approval({"approved": False}).approved is False
    with pytest.raises(ValueError, match="approved: expected a boolean, got the string 'yes'"):
        interrupt.approval({"approved": "yes"})
    with pytest.raises(ValueError, match="the required member 'approved' is missing"):
        interrupt.approval({"reason": "ok"})


def test_a_manifest_interrupt_answers_a_review_through_the_guard() -> None:
    (interrupt,) = mailcomposer().interrupts
    raised: list[Mapping[str, Any]] = []
    answers = iter([{"approved": True, "reason": "fine"}, {"approved": False, "reason": "wrong recipient"}])

    def ask(payload: dict[str, Any]) -> Mapping[str, Any]:
        raised.append(payload)
        return next(answers)

    guard = Guard.from_yaml(MAILER_SPEC, reviewers={"mail-approver": interrupt.reviewer(ask)})

    @guard.tool
    def send_email(subject: str, body: str, recipients: list[str], priority: str = "normal") -> str:
        return "sent"

    with guard.engagement():
        assert send_email("Hi", "Hello Bob", ["bob@corp.example"]) == "sent"
        with pytest.raises(ReviewDenied, match="wrong recipient"):
            send_email("Hi", "Hello Eve", ["eve@evil.example"])
    # the payload carries what the interrupt declares, not the rest of the call
    assert raised[0] == {"subject": "Hi", "body": "Hello Bob", "recipients": ["bob@corp.example"]}


def test_a_call_that_cannot_fill_the_interrupt_is_rejected_without_asking() -> None:
    (interrupt,) = mailcomposer().interrupts
    asked: list[object] = []
    guard = Guard.from_yaml(MAILER_SPEC, reviewers={"mail-approver": interrupt.reviewer(asked.append)})  # type: ignore[arg-type]

    @guard.tool
    def send_email(subject: str) -> str:
        return "sent"

    with guard.engagement(), pytest.raises(ReviewDenied, match="cannot ask through the interrupt"):
        send_email("Hi")
    assert asked == []


def test_an_invalid_resume_body_denies() -> None:
    (interrupt,) = mailcomposer().interrupts
    guard = Guard.from_yaml(MAILER_SPEC, reviewers={"mail-approver": interrupt.reviewer(lambda p: {"ok": 1})})

    @guard.tool
    def send_email(subject: str, body: str, recipients: list[str]) -> str:
        return "sent"

    with guard.engagement(), pytest.raises(ReviewDenied, match="the required member 'approved' is missing"):
        send_email("Hi", "b", ["bob@corp.example"])


def test_agentguards_review_gate_as_an_acp_interrupt() -> None:
    raised: list[dict[str, Any]] = []

    async def ask(payload: dict[str, Any]) -> Mapping[str, Any]:
        raised.append(payload)
        return {"approved": True, "approvedBy": "ann@corp.example"}

    guard = Guard.from_yaml(MAILER_SPEC, reviewers={"mail-approver": REVIEW_INTERRUPT.reviewer(ask)})

    @guard.tool
    async def send_email(subject: str) -> str:
        return "sent"

    async def run() -> str:
        async with guard.engagement() as eng:
            result = await send_email("Hi")
            review = next(d for d in eng.decisions if d.rule is Rule.REVIEW)
            assert review.data is not None
            assert review.data["approvals"][0]["approvedBy"] == "ann@corp.example"
            return str(result)

    assert asyncio.run(run()) == "sent"
    (payload,) = raised
    assert REVIEW_INTERRUPT.check_payload(payload).passed
    assert (payload["reviewer"], payload["capability"], payload["phase"]) == (
        "mail-approver",
        "send-email",
        "input",
    )
    assert payload["inputs"] == {"subject": "Hi"}


def test_publishing_the_review_interrupt_in_a_manifest() -> None:
    data = json.loads(fixture("mailcomposer.manifest.json").read_text())
    published = with_review_interrupt(data)
    assert with_review_interrupt(published) == published  # once
    assert [i["interrupt_type"] for i in published["specs"]["interrupts"]] == [
        "mail_send_approval",
        REVIEW_INTERRUPT_TYPE,
    ]
    assert published["specs"]["capabilities"]["interrupts"] is True
    assert (
        data["specs"]["interrupts"][0]["interrupt_type"] == "mail_send_approval"
    )  # the input is not changed
    descriptor = parse_descriptor(json.dumps(published))
    assert [i.interrupt_type for i in descriptor.interrupts] == ["mail_send_approval", REVIEW_INTERRUPT_TYPE]


# ------------------------------------------------------------------------------------------- problems


def test_manifest_problems_have_file_field_and_line() -> None:
    text = """\
metadata:
  ref: {name: org.corp.agent}
specs:
  input: {type: objekt}
  interrupts:
    - interrupt_type: approval
      interrupt_payload: {type: object}
dependencies: [{version: "1"}]
"""
    with pytest.raises(SpecError) as info:
        parse_descriptor(text, source="manifest.yaml")
    assert [str(p) for p in info.value.problems] == [
        "manifest.yaml:1:1: metadata.description: required, a string",
        "manifest.yaml:2:3: metadata.ref.version: required, a string",
        "manifest.yaml:4:11: specs.input.type: type must be one of array, boolean, integer, null, number, "
        "object, string (or a list of them)",
        "manifest.yaml:6:7: specs.interrupts.0.resume_payload: required, a JSON schema",
        "manifest.yaml:8:16: dependencies.0.name: required, a string",
    ]


def test_interrupts_declared_with_the_capability_off_is_a_warning() -> None:
    data = json.loads(fixture("mailcomposer.manifest.json").read_text())
    data["specs"]["capabilities"]["interrupts"] = False
    (warning,) = parse_descriptor(json.dumps(data)).warnings
    assert warning.field == "specs.capabilities.interrupts"
