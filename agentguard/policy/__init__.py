"""Pure policy decisions: capabilities, restrictions, guardrails, review gates, identity, exposes.

The pipeline itself lives in :mod:`agentguard.pipeline` (sans-I/O); :class:`agentguard.Guard` drives it.
This package's public names are re-exported from :mod:`agentguard`.
"""

from agentguard.policy._identity import (
    CredentialRequest,
    CredentialResolver,
    Credentials,
    current_credentials,
)
from agentguard.policy._policy import Assertion, CapabilityRule, GuardrailRule, Policy, UnknownCapability
from agentguard.policy._review import Approval, ApprovalConfig, Reviewer, ReviewRequest, TerminalReviewer
from agentguard.policy._rules import CheckResult, RuleContext, RuleFunction, Rules, Severity, SeverityMap

__all__ = [
    "Approval",
    "ApprovalConfig",
    "Assertion",
    "CapabilityRule",
    "CheckResult",
    "CredentialRequest",
    "CredentialResolver",
    "Credentials",
    "GuardrailRule",
    "Policy",
    "ReviewRequest",
    "Reviewer",
    "RuleContext",
    "RuleFunction",
    "Rules",
    "Severity",
    "SeverityMap",
    "TerminalReviewer",
    "UnknownCapability",
    "current_credentials",
]
