"""Python rules beside CEL ones, and severity: error blocks, warning / info only record (shadow mode)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentguard import (
    CheckResult,
    Guard,
    GuardrailViolation,
    Outcome,
    RestrictionViolation,
    Rule,
    RuleContext,
    RuleViolation,
    ShortCircuitViolation,
)
from tests.conftest import spec_text

SPEC = spec_text(
    """
    capabilities:
      send-email:
        input_restriction:
          assertion: recent["send-email"].inputs.to.endsWith("@corp.com")
      refund:
        input_restriction:
          assertion: recent["refund"].inputs.amount <= 100
        output_restriction:
          assertion: recent["refund"].outputs.ok == true
    guardrails:
      input:
        tool_name: pii-check
        assertion: output.ok
    lifespan:
      short_circuit: 2
    """
)


def _guard(**options: Any) -> tuple[Guard, list[Any]]:
    guard = Guard.from_yaml(SPEC, **options)
    ran: list[Any] = []

    @guard.tool
    def send_email(to: str) -> str:
        ran.append(to)
        return "sent"

    @guard.tool
    def refund(amount: int) -> dict[str, bool]:
        ran.append(amount)
        return {"ok": amount != 13}

    @guard.tool(name="delete-all")
    def delete_all() -> str:
        ran.append("delete")
        return "deleted"

    @guard.tool(name="pii-check")
    def pii(text: str) -> dict[str, bool]:
        return {"ok": "ssn" not in text}

    return guard, ran


def _warnings(eng: Any) -> list[tuple[str, str]]:
    return [(d.rule.value, d.severity) for d in eng.decisions if d.outcome is Outcome.WARN]


def test_shadow_mode_denies_nothing_and_reports_every_would_be_denial() -> None:
    guard, ran = _guard(
        severity={
            "restriction": "warning",
            "capability": "warning",
            "short-circuit": "info",
            "guardrail": "warning",
        }
    )
    with guard.engagement() as eng:
        assert eng.check_input("my ssn is 1") == "my ssn is 1"
        assert guard.call("send-email", {"to": "eve@evil.test"}) == "sent"
        assert guard.call("refund", {"amount": 500}) == {"ok": True}
        assert guard.call("refund", {"amount": 13}) == {"ok": False}  # a b b: would short-circuit at k = 2
        assert guard.call("delete-all", {}) == "deleted"
        assert eng.status.value == "active"
        assert eng.view()["recent"]["refund"]["outputs"] == {"ok": False}  # not withheld in shadow mode
    assert ran == ["eve@evil.test", 500, 13, "delete"]
    assert _warnings(eng) == [
        ("guardrail", "warning"),
        ("restriction", "warning"),
        ("restriction", "warning"),
        ("short-circuit", "info"),
        ("restriction", "warning"),
        ("capability", "warning"),
    ]
    assert all("would deny" in d.reason for d in eng.decisions if d.outcome is Outcome.WARN)


def test_the_most_specific_severity_wins() -> None:
    guard, ran = _guard(severity={"restriction": "warning", "restriction:refund:input": "error"})
    with guard.engagement():
        assert guard.call("send-email", {"to": "eve@evil.test"}) == "sent"
        with pytest.raises(RestrictionViolation):
            guard.call("refund", {"amount": 500})
    assert ran == ["eve@evil.test"]


def test_errors_still_block_by_default() -> None:
    guard, _ = _guard()
    with guard.engagement() as eng, pytest.raises(GuardrailViolation):
        eng.check_input("ssn")
    guard2, _ = _guard()
    with guard2.engagement():
        guard2.call("refund", {"amount": 1})
        with pytest.raises(ShortCircuitViolation):
            guard2.call("refund", {"amount": 1})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"restriction": "fatal"}, "must be error, warning or info"),
        ({"restrictions": "warning"}, "unknown rule kind"),
        ({"review": "warning"}, "always block"),
        ({"guardian": "info"}, "always block"),
    ],
)
def test_bad_severity_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _guard(severity=settings)


def test_python_rules_run_beside_cel_ones() -> None:
    guard, ran = _guard()
    seen: list[RuleContext] = []

    @guard.rules.rule("max-three-refunds", capabilities={"refund"})
    def max_three(ctx: RuleContext) -> bool:
        seen.append(ctx)
        return ctx.view()["history"]["_total"] <= 3

    @guard.rules.rule("result-must-be-ok", phase="output", capabilities={"refund"})
    def result_ok(ctx: RuleContext) -> CheckResult:
        return CheckResult(ctx.outputs["ok"] and ctx.inputs["amount"] != 7, "refund result checked", {"n": 1})

    with guard.engagement() as eng:
        guard.call("refund", {"amount": 1})
        guard.call("send-email", {"to": "a@corp.com"})
        with pytest.raises(RuleViolation) as info:
            guard.call("refund", {"amount": 7})
        assert info.value.rule_name == "result-must-be-ok"
        assert info.value.rule is Rule.RULE
        assert eng.view()["recent"]["refund"]["outputs"] is None  # withheld, like an output restriction
    assert seen[0].capability == "refund"
    assert seen[0].inputs == {"amount": 1}
    assert ran == [1, "a@corp.com", 7]


def test_a_rule_that_raises_or_returns_garbage_fails() -> None:
    guard, ran = _guard()
    guard.rules.add("boom", lambda ctx: 1 / 0, capabilities={"send-email"})
    guard.rules.add("garbage", lambda ctx: "yes", capabilities={"refund"})  # type: ignore[arg-type,return-value]
    with guard.engagement():
        with pytest.raises(RuleViolation, match="raised ZeroDivisionError"):
            guard.call("send-email", {"to": "a@corp.com"})
        with pytest.raises(RuleViolation, match="not a bool"):
            guard.call("refund", {"amount": 1})
    assert ran == []
    with pytest.raises(ValueError, match="already registered"):
        guard.rules.add("boom", lambda ctx: True)


@pytest.mark.parametrize("passed", ["blocked: a secret", "false", 1, [False], None])
def test_a_check_result_whose_passed_is_no_bool_fails(passed: object) -> None:
    """``CheckResult("blocked: a secret")`` puts the message where the verdict goes; a non-empty string is
    true to Python, so it passed."""
    guard, ran = _guard()
    guard.rules.add("odd", lambda ctx: CheckResult(passed, "m"), capabilities={"refund"})  # type: ignore[arg-type]
    with guard.engagement(), pytest.raises(RuleViolation, match="not a bool"):
        guard.call("refund", {"amount": 1})
    assert ran == []


def test_a_rule_in_shadow_mode_by_name() -> None:
    guard, ran = _guard(severity={"rule:new-policy": "warning"})
    guard.rules.add("new-policy", lambda ctx: False)
    with guard.engagement() as eng:
        guard.call("send-email", {"to": "a@corp.com"})
    assert ran == ["a@corp.com"]
    assert _warnings(eng) == [("rule", "warning")]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_output_rules_judge_a_failed_calls_error_text(asynchronous: bool) -> None:
    """A tool's error goes back to the caller (through MCP and the agent SDKs, to the model): the output
    restriction and the guardian judged its text, the output rules did not, and 'SECRET' went through."""
    guard, _ = _guard()
    outputs: list[Any] = []

    @guard.rules.rule("no-secret", phase="output", capabilities={"send-email"})
    def no_secret(ctx: RuleContext) -> bool:
        outputs.append(ctx.outputs)
        return "SECRET" not in str(ctx.outputs)

    def leaky(to: str) -> Any:
        raise ValueError(f"SECRET mailbox of {to}")

    async def aleaky(to: str) -> Any:
        leaky(to)

    def call() -> Any:
        if asynchronous:
            return asyncio.run(guard.acall("send-email", {"to": "a@corp.com"}, aleaky))
        return guard.call("send-email", {"to": "a@corp.com"}, leaky)

    with guard.engagement() as eng:
        with pytest.raises(RuleViolation) as info:
            call()
        assert info.value.rule_name == "no-secret"
        assert "SECRET" not in str(info.value)
        assert info.value.__cause__ is None
        assert info.value.__suppress_context__
        assert outputs == ["SECRET mailbox of a@corp.com"]
        assert "SECRET" not in str(eng.view())
