"""agentguard: make AI agents safe to run in production.

An OpenAgentSpec file says what an agent may do; a :class:`Guard` enforces it in process around every tool
call, guardrail and review, keeps the Engagement record, and reports each step::

    from agentguard import Guard, User

    guard = Guard.from_file("examples/support-agent/agent.yaml")

    @guard.tool
    def send_email(to: str, body: str) -> dict:
        return {"status": "sent"}

    with guard.engagement(user=User(id="u1", email="ann@corp.com")) as eng:
        send_email(to="bob@corp.com", body="hi")       # allowed: the recipient is @corp.com
        send_email(to="eve@evil.test", body="hi")      # raises RestrictionViolation

``import agentguard`` loads no agent framework, web server or OpenTelemetry SDK, and nothing else either: each
name below is imported from its module on first use, so the command line and tools that need one corner of
the library (``agentguard validate``, ``--help``) do not pay for all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentguard._lazy import lazy_attributes

if TYPE_CHECKING:
    from agentguard.engagement import Engagement
    from agentguard.errors import (
        AgentGuardError,
        CapabilityDenied,
        ConfigurationError,
        EngagementClosed,
        GuardianDenied,
        GuardrailViolation,
        IdentityError,
        Phase,
        PolicyViolation,
        RestrictionViolation,
        ReviewDenied,
        Rule,
        RuleViolation,
        ShortCircuitViolation,
        SpecError,
        SpecProblem,
        StoreDenied,
        StoreUnavailable,
        ToolError,
    )
    from agentguard.guard import Guard
    from agentguard.pipeline import AgentInfo
    from agentguard.policy import (
        Approval,
        ApprovalConfig,
        CheckResult,
        CredentialRequest,
        CredentialResolver,
        Credentials,
        Reviewer,
        ReviewRequest,
        RuleContext,
        Severity,
        TerminalReviewer,
        current_credentials,
    )
    from agentguard.record import Decision, EngagementStatus, Outcome, StepRecord, User, ValueLimits

__version__ = "0.1.0"

__all__ = [
    "AgentGuardError",
    "AgentInfo",
    "Approval",
    "ApprovalConfig",
    "CapabilityDenied",
    "CheckResult",
    "ConfigurationError",
    "CredentialRequest",
    "CredentialResolver",
    "Credentials",
    "Decision",
    "Engagement",
    "EngagementClosed",
    "EngagementStatus",
    "Guard",
    "GuardianDenied",
    "GuardrailViolation",
    "IdentityError",
    "Outcome",
    "Phase",
    "PolicyViolation",
    "RestrictionViolation",
    "ReviewDenied",
    "ReviewRequest",
    "Reviewer",
    "Rule",
    "RuleContext",
    "RuleViolation",
    "Severity",
    "ShortCircuitViolation",
    "SpecError",
    "SpecProblem",
    "StepRecord",
    "StoreDenied",
    "StoreUnavailable",
    "TerminalReviewer",
    "ToolError",
    "User",
    "ValueLimits",
    "__version__",
    "current_credentials",
]

_EXPORTS = {
    "agentguard.pipeline": ("AgentInfo",),
    "agentguard.record": ("Decision", "EngagementStatus", "Outcome", "StepRecord", "User", "ValueLimits"),
    "agentguard.engagement": ("Engagement",),
    "agentguard.errors": (
        "AgentGuardError",
        "CapabilityDenied",
        "ConfigurationError",
        "EngagementClosed",
        "GuardianDenied",
        "GuardrailViolation",
        "IdentityError",
        "Phase",
        "PolicyViolation",
        "RestrictionViolation",
        "ReviewDenied",
        "Rule",
        "RuleViolation",
        "ShortCircuitViolation",
        "SpecError",
        "SpecProblem",
        "StoreDenied",
        "StoreUnavailable",
        "ToolError",
    ),
    "agentguard.guard": ("Guard",),
    "agentguard.policy": (
        "Approval",
        "ApprovalConfig",
        "CheckResult",
        "CredentialRequest",
        "CredentialResolver",
        "Credentials",
        "Reviewer",
        "ReviewRequest",
        "RuleContext",
        "Severity",
        "TerminalReviewer",
        "current_credentials",
    ),
}
"""Where each public name lives; the ``TYPE_CHECKING`` imports above say the same for type checkers."""

__getattr__ = lazy_attributes(
    __name__, {name: module for module, names in _EXPORTS.items() for name in names}
)


def __dir__() -> list[str]:
    return sorted(__all__)
