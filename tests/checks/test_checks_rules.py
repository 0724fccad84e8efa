"""Every kind of decision the Guard records, read as an OS Protocol RuleResult (ruleName, passed, severity)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentguard import (
    Approval,
    CapabilityDenied,
    Decision,
    EngagementClosed,
    Guard,
    GuardrailViolation,
    IdentityError,
    Outcome,
    Phase,
    RestrictionViolation,
    ReviewDenied,
    ReviewRequest,
    Rule,
    RuleViolation,
    ShortCircuitViolation,
    StepRecord,
    User,
    steps,
)
from agentguard.checks import RuleResult, rule_result, rule_results
from agentguard.pipeline import new_step
from agentguard.record import EngagementState
from agentguard.runs import Timeout, ToolTimeout
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
      refund:
        input_restriction:
          require_review: supervisor
        output_restriction:
          require_review: auditor
          assertion: recent["refund"].outputs.ok == true
      crm:
      search:
    guardrails:
      input:
        tool_name: pii-check
        assertion: output.ok
    lifespan:
      short_circuit: 3
    """
)


def _refuse(request: ReviewRequest) -> bool:
    """The reviewer a test does not choose: it refuses (a guard cannot start without every reviewer)."""
    return False


def _guard(**options: Any) -> Guard:
    guard = Guard.from_yaml(
        SPEC,
        **{
            **options,
            "reviewers": {"supervisor": _refuse, "auditor": _refuse, **options.get("reviewers", {})},
        },
    )

    @guard.tool
    def send_email(to: str) -> str:
        return "sent"

    @guard.tool
    def refund(amount: int) -> dict[str, bool]:
        return {"ok": amount != 13}

    @guard.tool(needs_credentials=True)
    def crm(q: str) -> str:
        return "record"

    @guard.tool
    def search(q: str) -> str:
        return "hits"

    @guard.tool(name="shell")
    def shell(cmd: str) -> str:
        return "ran"

    @guard.tool(name="pii-check")
    def pii(text: str) -> dict[str, bool]:
        return {"ok": "ssn" not in text}

    return guard


def _summary(results: list[RuleResult]) -> list[tuple[str, bool, str]]:
    return [(r.rule_name, r.passed, r.severity) for r in results]


def test_spec_checks_map_to_kind_capability_phase_names() -> None:
    guard = _guard(reviewers={"supervisor": lambda request: True, "auditor": lambda request: True})
    with guard.engagement(user=User(id="u1")) as eng:
        guard.call("send-email", {"to": "bob@corp.com"})
        with pytest.raises(RestrictionViolation):
            guard.call("send-email", {"to": "eve@evil.test"})
        guard.call("refund", {"amount": 5})
        with pytest.raises(CapabilityDenied):
            guard.call("shell", {"cmd": "ls"})
    loop = [("short-circuit:send-email:input", True, "error")]
    assert _summary(rule_results(eng)) == [
        ("capability:send-email:input", True, "error"),
        *loop,
        ("restriction:send-email:input", True, "error"),
        ("capability:send-email:input", True, "error"),
        *loop,
        ("restriction:send-email:input", False, "error"),
        ("capability:refund:input", True, "error"),
        ("short-circuit:refund:input", True, "error"),
        ("review:refund:input", True, "error"),
        ("restriction:refund:output", True, "error"),
        ("review:refund:output", True, "error"),
        ("capability:shell:input", False, "error"),
    ]


def test_metadata_carries_the_decision_and_its_step() -> None:
    guard = _guard(
        reviewers={
            "supervisor": lambda request: Approval(True, "fine", "alice"),
            "auditor": lambda request: True,
        }
    )
    with guard.engagement(user=User(id="u1")) as eng:
        with pytest.raises(RestrictionViolation):
            guard.call("send-email", {"to": "eve@evil.test"})
        guard.call("refund", {"amount": 5}, call_id="c-9")
    denied = next(r for r in rule_results(eng) if not r.passed)
    step = eng.steps[0]
    assert denied.message == "assertion is false"
    assert denied.metadata is not None
    assert denied.metadata["kind"] == "restriction"
    assert denied.metadata["outcome"] == "deny"
    assert denied.metadata["capability"] == "send-email"
    assert denied.metadata["phase"] == "input"
    assert denied.metadata["expression"] == 'recent["send-email"].inputs.to.endsWith("@corp.com")'
    assert str(denied.metadata["at"]).endswith("Z")
    assert denied.metadata["step"] == {
        "id": step.step_id,
        "kind": "steps/toolCallRequest",
        "turnId": step.turn_id,
        "name": "send-email",
        "callId": step.call_id,
    }
    review = next(r for r in rule_results(eng) if r.rule_name == "review:refund:input")
    assert review.metadata is not None
    data = review.metadata["data"]
    assert isinstance(data, dict)
    assert data["reviewer"] == "supervisor"
    approvals = data["approvals"]
    assert isinstance(approvals, list)
    [approval] = approvals
    assert isinstance(approval, dict)
    assert (approval["approved"], approval["reason"], approval["approvedBy"]) == (True, "fine", "alice")


def test_review_rejection_fails_with_error_severity() -> None:
    guard = _guard(reviewers={"supervisor": lambda request: Approval(False, "too much", "alice")})
    with guard.engagement(user=User(id="u1")) as eng, pytest.raises(ReviewDenied):
        guard.call("refund", {"amount": 5})
    result = rule_results(eng)[-1]
    assert (result.rule_name, result.passed, result.severity) == ("review:refund:input", False, "error")
    assert result.metadata is not None
    assert result.metadata["outcome"] == "review-rejected"


def test_guardrail_short_circuit_identity_and_closed_engagement() -> None:
    guard = _guard()
    with guard.engagement() as eng:  # no user: crm gets no credentials
        with pytest.raises(IdentityError):
            guard.call("crm", {"q": "x"})
        guard.call("search", {"q": "a"})
        guard.call("search", {"q": "a"})
        with pytest.raises(ShortCircuitViolation):
            guard.call("search", {"q": "a"})
        with pytest.raises(ShortCircuitViolation):  # the engagement stays stopped
            eng.check_input("hello")
    names = _summary(rule_results(eng))
    assert ("identity:crm:input", False, "error") in names
    assert names.count(("short-circuit:search:input", True, "error")) == 2
    assert ("short-circuit:search:input", False, "error") in names
    assert names[-1] == ("short-circuit:input", False, "error")  # no capability: a message step

    guard = _guard()
    with guard.engagement() as eng:
        assert eng.check_input("hello") == "hello"
        with pytest.raises(GuardrailViolation):
            eng.check_input("my ssn")
        with pytest.raises(GuardrailViolation):  # failed engagement: refused, reported as guardrail
            guard.call("search", {"q": "a"})
    assert _summary(rule_results(eng)) == [
        ("guardrail:pii-check:input", True, "error"),
        ("guardrail:pii-check:input", False, "error"),
        ("guardrail:search:input", False, "error"),
    ]


def test_cancelled_engagement_refusals_are_engagement_rule_results() -> None:
    guard = _guard()
    with guard.engagement() as eng:
        eng.state.stop(eng.state.status.CANCELLED, "user hung up")
        with pytest.raises(EngagementClosed):
            guard.call("search", {"q": "a"})
    assert _summary(rule_results(eng)) == [("engagement:search:input", False, "error")]
    assert rule_results(eng)[0].message == "engagement is cancelled: user hung up"


def test_reported_steps_map_to_engagement_results() -> None:
    guard = _guard()
    with guard.engagement() as eng:
        eng.report(steps.Message("agent", "hello"))
    assert _summary(rule_results(eng)) == [("engagement:agent:output", True, "error")]


def test_python_rules_and_schema_checks() -> None:
    guard = _guard()
    guard.rules.add("named", lambda ctx: True, capabilities={"search"})
    guard.rules.add(
        "shape",
        lambda ctx: isinstance(ctx.outputs, dict),
        phase="output",
        capabilities={"search"},
        kind=Rule.SCHEMA,
    )
    with guard.engagement() as eng, pytest.raises(RuleViolation):
        guard.call("search", {"q": "a"})
    # The pipeline's decisions do not carry a plain rule's name: capability and phase identify it.
    assert _summary(rule_results(eng))[-2:] == [
        ("rule:search:input", True, "error"),
        ("schema:search:output", False, "error"),
    ]


def test_shadow_mode_would_be_denials_fail_at_their_severity() -> None:
    guard = _guard(severity={"restriction": "warning", "capability": "info"})
    with guard.engagement(user=User(id="u1")) as eng:
        guard.call("send-email", {"to": "eve@evil.test"})
        guard.call("shell", {"cmd": "ls"})
    failed = [
        (r.rule_name, r.severity, (r.metadata or {})["outcome"]) for r in rule_results(eng) if not r.passed
    ]
    assert failed == [
        ("restriction:send-email:input", "warning", "warn"),
        ("capability:shell:input", "info", "warn"),
    ]


def test_observe_mode_unknown_capability_is_a_warning() -> None:
    guard = _guard(unknown_capability="observe")
    with guard.engagement() as eng:
        guard.call("shell", {"cmd": "ls"})
    assert _summary(rule_results(eng))[0] == ("capability:shell:input", False, "warning")


def _step() -> StepRecord:
    return new_step(EngagementState(), "steps/toolCallRequest", name="search", call_id="c1")


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (
            Decision(Rule.GUARDIAN, Outcome.ALLOW, Phase.INPUT, "ok", "search"),
            ("guardian:search:input", True, "error"),
        ),
        (
            Decision(Rule.GUARDIAN, Outcome.MODIFY, Phase.OUTPUT, "", "search"),
            ("guardian:search:output", True, "error"),
        ),
        (
            Decision(Rule.GUARDIAN, Outcome.DENY, Phase.INPUT, "no", "search"),
            ("guardian:search:input", False, "error"),
        ),
        (
            Decision(Rule.GUARDIAN, Outcome.NO_DECISION, Phase.INPUT, "proceeded", "search"),
            ("guardian:search:input", False, "warning"),
        ),
        (
            Decision(Rule.RULE, Outcome.DENY, Phase.OUTPUT, "bad", "search", data={"rule": "judge:tone"}),
            ("rule:judge:tone", False, "error"),
        ),
        (
            Decision(
                Rule.SCHEMA,
                Outcome.WARN,
                Phase.OUTPUT,
                "bad",
                "search",
                data={"rule": "shape"},
                severity="info",
            ),
            ("schema:shape", False, "info"),
        ),
        (
            Decision(Rule.GUARDRAIL, Outcome.DENY, Phase.OUTPUT, "stopped"),
            ("guardrail:output", False, "error"),
        ),
        (Decision(Rule.ENGAGEMENT, Outcome.ALLOW), ("engagement", True, "error")),
        (
            Decision(Rule.REVIEW, Outcome.REVIEW_PENDING, Phase.INPUT, "waiting", "refund"),
            ("review:refund:input", False, "info"),
        ),
        (
            Decision(Rule.RUN, Outcome.WARN, Phase.INPUT, "slow", "search"),
            ("run:search:input", False, "warning"),
        ),
    ],
)
def test_decision_mapping(decision: Decision, expected: tuple[str, bool, str]) -> None:
    result = rule_result(decision, _step())
    assert (result.rule_name, result.passed, result.severity) == expected
    assert result.message  # never empty: the outcome stands in for a missing reason


def test_data_that_is_not_json_is_kept_as_text() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    decision = Decision(Rule.RULE, Outcome.ALLOW, Phase.INPUT, "ok", "search", data={"x": Opaque(), "n": 1})
    result = rule_result(decision, _step())
    assert result.metadata is not None
    assert result.metadata["data"] == {"x": "opaque", "n": 1}
    assert RuleResult.model_validate(result.wire()) == result
    assert set(result.wire()) == {"ruleName", "passed", "severity", "message", "metadata"}


@pytest.mark.parametrize(
    ("number", "text"), [(float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity")]
)
def test_a_number_json_cannot_hold_is_kept_as_text(number: float, text: str) -> None:
    """Before, a passing rule whose metadata copied a model's ``{"amount": NaN}`` (Python's JSON reader makes a
    float of it) made ``rule_results`` raise for the whole engagement, so its audit report, the denials in it
    too, was never written."""
    decision = Decision(Rule.RULE, Outcome.ALLOW, Phase.INPUT, "ok", "search", data={"amount": number})
    result = rule_result(decision, _step())
    assert result.metadata is not None
    assert result.metadata["data"] == {"amount": text}
    assert RuleResult.model_validate(result.wire()) == result


async def test_run_control_decisions_map_to_run_results() -> None:
    guard = Guard.from_yaml(spec_text("capabilities:\n  slow:\n"))

    @guard.tool(timeout=Timeout(ms=20))
    async def slow(q: str) -> str:
        await asyncio.sleep(5)
        return "late"

    async with guard.engagement() as eng:
        with pytest.raises(ToolTimeout):
            await slow("x")
    result = rule_results(eng)[-1]
    assert (result.rule_name, result.passed, result.severity) == ("run:slow:input", False, "error")
    assert result.message == "did not finish within 20 ms (on_timeout: fail)"
