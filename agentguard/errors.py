"""The exceptions agentguard raises.

Every error a user can catch is re-exported from :mod:`agentguard`. The tree::

    AgentGuardError                 base of everything agentguard raises
    ├── SpecError                   a spec file is malformed (lists every problem: file, field, line, reason)
    ├── ConfigurationError          the Guard is used wrongly (unknown tool, no engagement open, ...)
    └── PolicyViolation             a rule stopped a step; the step did not happen (or its output was withheld)
        ├── CapabilityDenied        the tool or agent is not a capability of this agent
        ├── RestrictionViolation    an input or output restriction assertion failed
        ├── GuardrailViolation      the input or output guardrail failed; the engagement is failed
        ├── ShortCircuitViolation   a tool-call loop hit ``lifespan.short_circuit``; the engagement is stopped
        ├── ReviewDenied            ``require_review`` was rejected, timed out or had no reviewer
        ├── IdentityError           the tool needs credentials and none could be resolved
        ├── EngagementClosed        the engagement was stopped or failed earlier and refuses further steps
        ├── GuardianDenied          the remote guardian answered ``deny`` (or failed under ``on_failure="deny"``)
        └── RuleViolation           a Python rule registered with ``guard.rules`` (or a schema check) failed
    (GuardianUnavailable, in agentguard.guardian: an explicit ``ping`` found no guardian;
     RemoteAgentError, in agentguard.remote: a remote ``oagent://`` agent could not be used;
     ToolTimeout, in agentguard.runs: a call overran its OS Protocol Timeout)

Policy errors carry the rule that fired (:attr:`PolicyViolation.rule`, a :class:`Rule` enum value), the
capability and phase it applies to, the CEL expression where there is one, the human reason and the id of
the engagement, so that an adapter can report precisely which rule stopped a step.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TypedDict, Unpack

__all__ = [
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
]


class Rule(enum.StrEnum):
    """Which kind of rule made a decision."""

    CAPABILITY = "capability"
    RESTRICTION = "restriction"
    GUARDRAIL = "guardrail"
    SHORT_CIRCUIT = "short-circuit"
    REVIEW = "review"
    IDENTITY = "identity"
    GUARDIAN = "guardian"
    ENGAGEMENT = "engagement"
    RULE = "rule"
    SCHEMA = "schema"
    RUN = "run"  # timeouts and retries of a call (OS Protocol runs)
    STORE = "store"  # the engagement store (agentguard.stores) could not record a step

    # Hashed as the string it equals, in C: Enum's own __hash__ is a Python call, and the pipeline keys its
    # per-call caches by rule and phase.
    __hash__ = str.__hash__


class Phase(enum.StrEnum):
    """When a rule runs: before a step (``input``) or after it, on its result (``output``)."""

    INPUT = "input"
    OUTPUT = "output"

    __hash__ = str.__hash__  # as Rule's


class AgentGuardError(Exception):
    """Base class of every exception agentguard raises."""


class ConfigurationError(AgentGuardError):
    """agentguard was set up or called incorrectly (not a policy decision)."""


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec file.

    ``field`` is a dotted path into the document (``capabilities.send-email.input_restriction.assertion``);
    ``line`` and ``column`` are 1-based positions in the file, when known. For CEL problems,
    ``expression_line`` and ``expression_column`` point inside the expression text.
    """

    source: str
    field: str
    reason: str
    line: int | None = None
    column: int | None = None
    expression_line: int | None = None
    expression_column: int | None = None

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        inner = ""
        if self.expression_line is not None:
            inner = f" (in expression at {self.expression_line}:{self.expression_column})"
        field = self.field or "<document>"
        return f"{where}: {field}: {self.reason}{inner}"

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "field": self.field,
            "reason": self.reason,
            "line": self.line,
            "column": self.column,
            "expression_line": self.expression_line,
            "expression_column": self.expression_column,
        }


class SpecError(AgentGuardError):
    """A spec document is invalid. :attr:`problems` lists *every* problem found, not only the first.

    ``document`` says what kind of document it is in the message's header (``3 problems in guardian rules
    file rules.yaml:``), since the same error reports every YAML document agentguard reads.
    """

    def __init__(self, problems: Sequence[SpecProblem], *, document: str = "spec") -> None:
        self.problems: tuple[SpecProblem, ...] = tuple(problems)
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in {document}"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


class _Where(TypedDict, total=False):
    """Where a policy error happened: the keyword arguments every :class:`PolicyViolation` takes."""

    capability: str | None
    phase: Phase | None
    engagement_id: str | None


class _WhereAndWhy(_Where, total=False):
    expression: str | None


class PolicyViolation(AgentGuardError):
    """A rule stopped a step. The step was not carried out, or its output was withheld."""

    rule: Rule = Rule.CAPABILITY
    recoverable: ClassVar[bool] = False
    """Whether the agent may carry on after this denial: it refused one step, and the model can be told so
    (an error tool result) and try something else. ``False`` when the engagement itself is stopped (a loop, a
    failed guardrail, a closed engagement): the run must end. Adapters ask this; none keeps its own list."""

    def __init__(
        self,
        reason: str,
        *,
        capability: str | None = None,
        phase: Phase | None = None,
        expression: str | None = None,
        engagement_id: str | None = None,
    ) -> None:
        self.reason = reason
        self.capability = capability
        self.phase = phase
        self.expression = expression
        self.engagement_id = engagement_id
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [f"[{self.rule.value}"]
        if self.phase is not None:
            parts.append(f" {self.phase.value}")
        parts.append("]")
        if self.capability:
            parts.append(f" {self.capability}:")
        parts.append(f" {self.reason}")
        if self.expression:
            parts.append(f" (assertion: {self.expression})")
        return "".join(parts)


class CapabilityDenied(PolicyViolation):
    rule = Rule.CAPABILITY
    recoverable = True


class RestrictionViolation(PolicyViolation):
    rule = Rule.RESTRICTION
    recoverable = True


class GuardrailViolation(PolicyViolation):
    rule = Rule.GUARDRAIL


class ShortCircuitViolation(PolicyViolation):
    rule = Rule.SHORT_CIRCUIT


class ReviewDenied(PolicyViolation):
    rule = Rule.REVIEW
    recoverable = True


class IdentityError(PolicyViolation):
    rule = Rule.IDENTITY
    recoverable = True


class EngagementClosed(PolicyViolation):
    rule = Rule.ENGAGEMENT


class StoreUnavailable(AgentGuardError):
    """The engagement store (:mod:`agentguard.stores`) could not be reached, did not answer in time, or keeps
    a record of the engagement that cannot be read (raised when the engagement is opened).

    Stores raise it; the pipeline never lets it through: the store's ``on_failure`` turns it into a
    :class:`StoreDenied` (``deny``, the default) or a recorded warning (``allow``).
    """


class StoreDenied(PolicyViolation):
    """The engagement store could not record a step, and its failure policy is ``deny``: the step was not
    carried out, or its output was withheld. Not recoverable: what the other workers know of the engagement
    is no longer what this one does."""

    rule = Rule.STORE


class RuleViolation(PolicyViolation):
    """A Python rule (``guard.rules``) or a schema check failed. ``rule_name`` says which."""

    rule = Rule.RULE
    recoverable = True

    def __init__(
        self, reason: str, *, rule_name: str, kind: Rule = Rule.RULE, **where: Unpack[_WhereAndWhy]
    ) -> None:
        self.rule_name = rule_name
        self.rule = kind
        super().__init__(reason, **where)


class GuardianDenied(PolicyViolation):
    """The guardian denied the step, or could not decide and the failure policy is ``deny``."""

    rule = Rule.GUARDIAN
    recoverable = True

    def __init__(self, reason: str, *, reason_code: str | None = None, **where: Unpack[_Where]) -> None:
        self.reason_code = reason_code
        super().__init__(reason, **where)


class ToolError(AgentGuardError):
    """A guarded tool failed, and its own error could not be handed on carrying only what its checks saw.

    An error is an output (decision 23): its text passes the capability's output checks, and the error goes
    on without what they did not see (its chained errors, its notes, ``args`` beyond that text). One whose
    class would still show something else -- its own ``repr``, a ``str()`` that reads what was taken out --
    is raised as this instead: the message is the class's name and the checked text, ``error_type`` the
    class's name, and the traceback is the tool's.
    """

    def __init__(self, text: str, *, error_type: str) -> None:
        self.error_type = error_type
        super().__init__(f"{error_type}: {text}")
