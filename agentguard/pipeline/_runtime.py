"""The runtime of one Guard: everything a flow needs, resolved once per Guard (not per call).

The :class:`~agentguard.Engagement` facade is given this object, never the Guard: it holds the policy, the
registered tools, reviewers, observers and guardian, and which engagement is current in each thread or task.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentguard._binding import Registered
from agentguard.errors import Phase, Rule
from agentguard.observers import Observers
from agentguard.pipeline._steps import StepBuilder
from agentguard.policy._identity import CredentialResolver
from agentguard.policy._policy import HOLDS, CapabilityRule, Policy, UnknownCapability
from agentguard.policy._review import ApprovalConfig, Reviewer
from agentguard.policy._rules import Rules, SeverityMap
from agentguard.record import (
    Chains,
    Decision,
    EngagementState,
    Outcome,
    StepRecord,
    StepRef,
    ValueLimits,
    chained,
)

if TYPE_CHECKING:
    from agentguard.guardian import GuardianClient
    from agentguard.record import Journal
    from agentguard.stores import MemoryStore

__all__ = ["NO_LOOP", "Allows", "Runtime"]

_SHARED_LIMIT = 4096

NO_LOOP = "no block of calls repeated short_circuit times"
"""The reason of the short-circuit rule's allow decision."""


@dataclass(frozen=True, slots=True)
class Allows:
    """The shared allow decisions an allowed call of one capability takes, looked up once per call.

    ``input`` / ``output`` are ``None`` when the capability has no such assertion. ``begun``: the decisions
    an allowed call has when it becomes the pending one (the capability, and the short-circuit rule's when
    the spec has one), in order. ``checked_in`` and ``checked_out``: the decisions it has once its input
    restriction, and then its output restriction, passed (the tuples the Guard's chains share; ``None`` once
    those are full, and the decisions are then added one by one).
    """

    rule: CapabilityRule
    capability: Decision
    short_circuit: Decision
    input: Decision | None
    output: Decision | None
    begun: tuple[Decision, ...]
    checked_in: tuple[Decision, ...] | None
    checked_out: tuple[Decision, ...] | None


@dataclass(eq=False)
class Runtime:
    """Everything a flow needs from its Guard, resolved once per Guard (not per call)."""

    policy: Policy
    steps: StepBuilder
    unknown_capability: UnknownCapability = "deny"
    short_circuit_max_block: int = 100
    value_limits: ValueLimits = field(default_factory=ValueLimits)
    reviewers: Mapping[str, Reviewer] = field(default_factory=dict)
    approval: ApprovalConfig = field(default_factory=ApprovalConfig)
    approvals: Mapping[str, ApprovalConfig] = field(default_factory=dict)
    credential_resolver: CredentialResolver | None = None
    guardian: GuardianClient | None = None
    passthrough: tuple[type[BaseException], ...] = ()
    # The guard's registered tools, live: capability lookups (tool-before-agent) and guardrail tools.
    tools: Mapping[str, Registered] = field(default_factory=dict)
    observers: Observers = field(default_factory=Observers)
    rules: Rules = field(default_factory=Rules)
    # Review gates that come from elsewhere than the spec (an Agent Spec tool's requires_confirmation, ...):
    # capability name -> reviewer id, applied before the call when the spec names no input reviewer. Read-only:
    # added through :meth:`add_review_gate` only, which forgets :attr:`direct` (a gate written into the
    # mapping directly would not stop a tool that already runs direct).
    review_gates: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    severity: SeverityMap = field(default_factory=SeverityMap)
    # Where engagements are kept (agentguard.stores): the facade forgets a closed one in a MemoryStore.
    store: MemoryStore | Journal | None = None
    # The engagement open in each thread or asyncio task (an ``Engagement``; typed loosely because the
    # facade sits a layer above), and the tokens of its open ``with`` blocks, innermost last, so that every
    # block resets the value it set in its own thread or task.
    current: contextvars.ContextVar[Any] = field(
        default_factory=lambda: contextvars.ContextVar("agentguard_engagement", default=None)
    )
    tokens: contextvars.ContextVar[tuple[contextvars.Token[Any], ...]] = field(
        default_factory=lambda: contextvars.ContextVar("agentguard_tokens", default=())
    )

    _shared: dict[tuple[Rule, Phase, str, str, str | None, bool], Decision] = field(
        default_factory=dict, repr=False
    )
    _chains: Chains = field(default_factory=dict, repr=False)
    _allows: dict[str, Allows] = field(default_factory=dict, repr=False)
    _gating: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Held to add a review gate, and to keep a tool's decisions in :attr:`direct` (:meth:`direct_allows`)."""
    direct: dict[str, Allows] = field(default_factory=dict, repr=False)
    """Tool name -> the shared allow decisions of a call of it that may run directly as far as its capability
    goes (:meth:`direct_allows`): one look-up on the per-call path, where finding the capability, asking
    whether anyone reviews it, and finding its decisions took three calls."""

    def direct_allows(self, name: str, kind: str) -> Allows | None:
        """The shared allow decisions of a call of ``name`` that may run directly as far as its capability
        goes: the spec has one for it, and nobody reviews it before or after (the spec's ``require_review``, a
        review gate). ``None`` otherwise: the call takes the pipeline's general path.

        A tool's is kept in :attr:`direct`: its capability is a spec's, which does not change, and a review
        gate added later forgets them all (:meth:`add_review_gate`). An agent's capability depends on which
        tools are registered (tool-before-agent), so it is found again on every call.
        """
        gates = self.review_gates
        rule = self.policy.capability_for(name, kind, self.tools)
        if rule is None or rule.input_review or rule.output_review or name in gates:
            return None
        allows = self.allows(rule, name)
        if kind == "tool":
            with self._gating:  # kept only if no gate came meanwhile (it would stay unasked for good)
                if self.review_gates is gates and len(self.direct) < _SHARED_LIMIT:
                    self.direct[name] = allows
        return allows

    def add_review_gate(self, capability: str, reviewer_id: str) -> None:
        """Ask ``reviewer_id`` before every call of ``capability`` (when the spec names no input reviewer)."""
        with self._gating:
            self.review_gates = MappingProxyType({**self.review_gates, capability: reviewer_id})
            self.direct = {}  # a call of it must stop running directly at once

    def decide(self, state: EngagementState, step: StepRef, decision: Decision) -> Decision:
        """Record ``decision`` on ``step`` and tell the observers watching the step."""
        step = state.step_of(step)
        step.add(decision)
        if step.observed_by:
            Observers.decision(step.observed_by, state, step, decision)
        return decision

    def allow(self, state: EngagementState, step: StepRef, shared: Decision) -> None:
        """Record a :meth:`~agentguard.record.Decision.untimed` allow decision taken the same way on every call.

        Unwatched, the shared object itself is recorded (no allocation, no clock read); observers are given a
        copy timed now, since they measure the time between decisions.
        """
        if not isinstance(step, StepRecord):  # a direct call's record: nobody watches it
            state.add_shared(step, shared, self._chains)
        elif step.observed_by:
            self.decide(state, step, shared.timed())
        else:
            step.add_shared(shared, self._chains)

    def allowed(
        self,
        rule: Rule,
        phase: Phase,
        reason: str,
        capability: str,
        expression: str | None = None,
        *,
        in_spec: bool = False,
    ) -> Decision:
        """The shared allow decision of ``rule`` for ``capability`` (built on first use, then reused);
        ``in_spec``: see :attr:`~agentguard.record.Decision.in_spec`."""
        key = (rule, phase, reason, capability, expression, in_spec)
        shared = self._shared.get(key)
        if shared is None:
            shared = Decision.untimed(rule, Outcome.ALLOW, phase, reason, capability, expression, in_spec)
            if len(self._shared) < _SHARED_LIMIT:  # names come from agents: the cache must not grow unbounded
                self._shared[key] = shared
        return shared

    def allows(self, rule: CapabilityRule, name: str) -> Allows:
        """The shared allow decisions of a call of ``name`` under ``rule`` (one dict look-up once built)."""
        allows = self._allows.get(name)
        if allows is None or allows.rule is not rule:
            inp, out = rule.input_assertion, rule.output_assertion
            capability = self.allowed(Rule.CAPABILITY, Phase.INPUT, rule.allow_reason, name, in_spec=True)
            short_circuit = self.allowed(Rule.SHORT_CIRCUIT, Phase.INPUT, NO_LOOP, name)
            begun = (capability,) if self.policy.short_circuit is None else (capability, short_circuit)
            input_ = self.allowed(Rule.RESTRICTION, Phase.INPUT, HOLDS, name, inp.source) if inp else None
            output = self.allowed(Rule.RESTRICTION, Phase.OUTPUT, HOLDS, name, out.source) if out else None
            checked_in = begun if input_ is None else chained(begun, input_, self._chains)
            checked_out = (
                checked_in
                if output is None or checked_in is None
                else chained(checked_in, output, self._chains)
            )
            allows = Allows(rule, capability, short_circuit, input_, output, begun, checked_in, checked_out)
            if len(self._allows) < _SHARED_LIMIT:
                self._allows[name] = allows
        return allows
