"""Every decision the Guard records, as an OS Protocol ``RuleResult`` (``checks/rules``).

The Guard records decisions in its own terms (:class:`~agentguard.Decision`: which rule kind, which outcome,
on which capability and phase). Audit trails, judges and dashboards that speak the OS Protocol want
``RuleResult`` objects instead -- ``ruleName``, ``passed``, ``severity``, ``message``, ``metadata``. This module
is that translation, and nothing else: it does no I/O and decides nothing.

**ruleName.** One name per check, built so that it is also the key that sets the check's severity in
``Guard(severity=...)`` where that can be set (see :mod:`agentguard.policy._rules`):

====================================  =====================================================================
``<kind>:<capability>:<phase>``       a spec check on one capability: ``restriction:send-email:input``,
                                      ``capability:shell:input``, ``short-circuit:search:input``,
                                      ``review:refund:output``, ``identity:crm:input``,
                                      ``guardian:send-email:output``, ``run:fetch:input`` (a timeout or a
                                      retry); for guardrails the capability is the
                                      guardrail tool (``guardrail:pii-check:input``); for reported steps
                                      it is the step's name (``engagement:agent:output``)
``<kind>:<phase>``                    no capability is involved (``short-circuit:input``: a message
                                      refused in a stopped engagement)
``rule:<name>`` / ``schema:<name>``   a Python rule registered with ``guard.rules`` whose decision carries
                                      its name in ``data["rule"]`` (``rule:judge:tone`` for a judge);
                                      without it, ``rule:<capability>:<phase>``
====================================  =====================================================================

**passed and severity.** ``allow``, ``modify`` and ``review-approved`` pass (severity: the decision's);
``deny`` and ``review-rejected`` fail with severity ``error`` (they blocked the step); ``warn`` fails with the
severity it was recorded at, ``warning`` or ``info`` (shadow mode: the step went on); ``no-decision`` (the
guardian could not be asked and the step proceeded) fails with severity ``warning``; ``review-pending`` (the
host paused the run for a review; the step has not happened yet) fails with severity ``info``. Any outcome
added later counts as a blocking ``error`` until it is mapped here: a check never passes by default.

**metadata.** ``kind``, ``outcome``, ``capability``, ``phase``, ``expression``, ``at`` (ISO 8601 UTC), the step
(``step``: ``id``, ``kind``, ``name``, ``turnId``, ``callId``) and the decision's ``data`` (approvals, a
judge's result, a rule's metadata), all plain JSON so that a result survives a YAML or JSON round trip.

Example::

    from agentguard.checks import rule_results

    with guard.engagement(user=user) as eng:
        ...
    failed = [r for r in rule_results(eng) if not r.passed]
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue
from pydantic.alias_generators import to_camel

from agentguard.errors import Rule
from agentguard.record import Decision, EngagementState, Outcome, StepRecord, to_plain

if TYPE_CHECKING:
    from agentguard.guard import Engagement

__all__ = [
    "CheckModel",
    "RuleResult",
    "RuleSeverity",
    "decisions_of",
    "json_safe",
    "rule_name",
    "rule_result",
    "rule_results",
    "state_of",
]

RuleSeverity = Literal["error", "warning", "info"]

_PASSED = frozenset({Outcome.ALLOW, Outcome.MODIFY, Outcome.REVIEW_APPROVED})
_NAMED_KINDS = frozenset({Rule.RULE, Rule.SCHEMA})


class CheckModel(BaseModel):
    """Base of the OS Protocol ``checks`` models: camelCase on the wire, snake_case in Python.

    Unknown members are kept, as in :mod:`agentguard.aos`: an audit file written by another tool may carry
    fields this version does not know (the OS Protocol's own example adds ``type`` and ``status``), and
    reading and rewriting it must not drop them.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", allow_inf_nan=False
    )

    def wire(self) -> dict[str, Any]:
        """The OS Protocol wire shape: camelCase, unset optional members left out, JSON values only."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class RuleResult(CheckModel):
    """OS Protocol ``RuleResult``: the outcome of one rule evaluated once."""

    rule_name: str
    passed: bool
    severity: RuleSeverity
    message: str
    metadata: dict[str, JsonValue] | None = None


def json_safe(value: Any) -> JsonValue:
    """``value`` as plain JSON (anything JSON cannot hold becomes its ``str``; NaN and the infinities become
    ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``).

    A decision's ``data`` comes from user code (a rule's metadata, a reviewer's reason), which may copy the
    values of a call the model made (``{"amount": NaN}`` is what Python's JSON reader makes of a model's
    arguments); a report must be writable whatever it holds. A NaN left as a float made every rule result of
    the engagement unreadable (the models refuse it), so its audit report was never written.
    """
    converted: JsonValue = json.loads(json.dumps(to_plain(value), default=str), parse_constant=str)
    return converted


def rule_name(decision: Decision) -> str:
    """The ``ruleName`` of a decision (the scheme is in the module docstring)."""
    kind = decision.rule.value
    if decision.rule in _NAMED_KINDS and decision.data is not None:
        named = decision.data.get("rule")
        if isinstance(named, str) and named:
            return f"{kind}:{named}"
    parts = (kind, decision.capability, decision.phase.value if decision.phase is not None else None)
    return ":".join(part for part in parts if part)


def _pass_and_severity(decision: Decision) -> tuple[bool, RuleSeverity]:
    outcome = decision.outcome
    if outcome in _PASSED:
        return True, _severity(decision.severity, "error")
    if outcome is Outcome.WARN:
        # A warning never blocked; one recorded without a severity (unknown_capability="observe") is a warning.
        severity = _severity(decision.severity, "warning")
        return False, "warning" if severity == "error" else severity
    if outcome is Outcome.NO_DECISION:
        return False, "warning"
    if outcome is Outcome.REVIEW_PENDING:  # nothing is known yet; the step has not been carried out
        return False, "info"
    return False, "error"


_SEVERITIES: dict[str, RuleSeverity] = {"error": "error", "warning": "warning", "info": "info"}


def _severity(value: str, default: RuleSeverity) -> RuleSeverity:
    return _SEVERITIES.get(value, default)


def rule_result(decision: Decision, step: StepRecord) -> RuleResult:
    """One recorded decision, on ``step``, as an OS Protocol ``RuleResult``."""
    passed, severity = _pass_and_severity(decision)
    step_meta: dict[str, JsonValue] = {"id": step.step_id, "kind": step.kind, "turnId": step.turn_id}
    if step.name is not None:
        step_meta["name"] = step.name
    if step.call_id is not None:
        step_meta["callId"] = step.call_id
    metadata: dict[str, JsonValue] = {
        "kind": decision.rule.value,
        "outcome": decision.outcome.value,
        "at": datetime.fromtimestamp(decision.at, UTC).isoformat().replace("+00:00", "Z"),
        "step": step_meta,
    }
    if decision.capability is not None:
        metadata["capability"] = decision.capability
    if decision.phase is not None:
        metadata["phase"] = decision.phase.value
    if decision.expression is not None:
        metadata["expression"] = decision.expression
    if decision.data:
        metadata["data"] = json_safe(decision.data)
    return RuleResult(
        rule_name=rule_name(decision),
        passed=passed,
        severity=severity,
        message=decision.reason or decision.outcome.value,
        metadata=metadata,
    )


def state_of(source: Engagement | EngagementState) -> EngagementState:
    """The Engagement record behind an :class:`~agentguard.Engagement` (or the record itself)."""
    return source if isinstance(source, EngagementState) else source.state


def decisions_of(state: EngagementState) -> Iterator[tuple[StepRecord, Decision]]:
    """Every (step, decision) of an engagement, in the order they were taken."""
    for step in list(state.steps):
        for decision in list(step.decisions):
            yield step, decision


def rule_results(source: Engagement | EngagementState) -> list[RuleResult]:
    """Every decision of an engagement, in order, as ``RuleResult`` objects."""
    return [rule_result(decision, step) for step, decision in decisions_of(state_of(source))]
