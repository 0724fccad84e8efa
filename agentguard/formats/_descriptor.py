"""What a descriptor file says about an agent, in agentguard's terms, and how it is installed on a Guard.

The three formats say different things -- an Agent Spec agent has tools and confirmation flags, a manifest
has input/output schemas and sub-agents, an OS Protocol app binds providers -- but each boils down to the
same few pieces, so one :class:`Descriptor` carries them all and one :meth:`Descriptor.apply` installs
them. Pieces a format does not have are empty.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentguard.errors import ConfigurationError, Phase, Rule, SpecProblem
from agentguard.observers import Observer
from agentguard.pipeline import AgentInfo
from agentguard.policy import CheckResult, Reviewer, RuleContext

from ._document import Format
from ._schema import Schema, SchemaRule

if TYPE_CHECKING:
    from agentguard.guard import Guard

    from .manifest import Interrupt

__all__ = ["Descriptor", "LoadOptions"]

logger = logging.getLogger("agentguard.formats")


@dataclass(frozen=True)
class Descriptor:
    """An agent descriptor read from an Agent Spec, Agent Manifest or OS Protocol app file.

    ``agent_info``
        the AOS ``Agent`` fields (``None`` for an app file, which describes a distribution, not an agent).
    ``tools``
        AOS ``ToolDefinition`` dicts declared by the file; ``id`` is the capability name the guard calls.
    ``review_gates``
        capability → reviewer id: ask that reviewer before every call (Agent Spec ``requires_confirmation``).
    ``schema_rules``
        :class:`SchemaRule` checks of tool arguments and results against their declared JSON schemas.
    ``reviewers``
        reviewers the descriptor itself defines (the one denying confirmations when no human is in the loop).
    ``input_schema`` / ``output_schema``
        the agent's own input and output (Agent Spec ``inputs``/``outputs``, ACP ``specs.input``/``output``).
    ``sub_agents``
        the only sub-agents the agent may call (a manifest's ``dependencies``); ``None``: not declared.
    ``interrupts``
        the ACP interrupts the manifest declares.
    ``warnings``
        what the reader noticed without refusing the file (file, field, line).
    """

    format: Format
    source: str
    agent_info: AgentInfo | None = None
    tools: tuple[Mapping[str, Any], ...] = ()
    review_gates: Mapping[str, str] = field(default_factory=dict)
    schema_rules: tuple[SchemaRule, ...] = ()
    reviewers: Mapping[str, Reviewer] = field(default_factory=dict)
    input_schema: Schema | None = None
    output_schema: Schema | None = None
    sub_agents: frozenset[str] | None = None
    interrupts: tuple[Interrupt, ...] = ()
    observers: tuple[Observer, ...] = ()
    option_factories: Mapping[str, Callable[[], Any]] = field(default_factory=dict)
    warnings: tuple[SpecProblem, ...] = ()
    _applied: weakref.WeakSet[Guard] = field(
        default_factory=weakref.WeakSet, init=False, repr=False, compare=False
    )

    # -- checks the host calls ----------------------------------------------------------------------

    def check_input(self, payload: object) -> CheckResult:
        """Check what the agent is given (an ACP run input, an Agent Spec agent's inputs) against its schema."""
        return self._check(self.input_schema, payload, "the agent input")

    def check_output(self, payload: object) -> CheckResult:
        """Check what the agent produced (an ACP run output, structured outputs) against its schema."""
        return self._check(self.output_schema, payload, "the agent output")

    @staticmethod
    def _check(schema: Schema | None, payload: object, what: str) -> CheckResult:
        if schema is None:
            return CheckResult(True, f"no schema is declared for {what}")
        return schema.check(payload, what)

    # -- installing ---------------------------------------------------------------------------------

    def guard_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~agentguard.Guard` the file sets (an app's guardian, severity, approval).

        They only take effect when the Guard is built, so pass them there and then call :meth:`apply`::

            guard = Guard.from_file("agent.yaml", **descriptor.guard_options())
            descriptor.apply(guard)

        Each call builds fresh objects (a guardian client belongs to one guard).
        """
        return {name: make() for name, make in self.option_factories.items()}

    def apply(self, guard: Guard) -> tuple[SpecProblem, ...]:
        """Install the descriptor on ``guard``; return what does not fit the guard's OpenAgentSpec.

        Sets the AOS agent descriptor fields, adds the review gates and their reviewers, registers the
        schema checks as guard rules (``kind=Rule.SCHEMA``), denies calls to sub-agents the manifest does
        not list among its dependencies, and adds observers (an app's audit). Applying the same descriptor
        twice changes nothing. :meth:`guard_options` are not applied here: they belong to the constructor.

        The returned problems (also logged as warnings) name tools, gates and dependencies that are not
        capabilities of the spec: the guard's allow-list denies those calls whatever the descriptor says.
        """
        if guard in self._applied:
            return self._misfits(guard)
        if self.agent_info is not None:
            guard.agent_info = self.agent_info
        for reviewer_id, reviewer in self.reviewers.items():
            guard.add_reviewer(reviewer_id, reviewer)
        for capability, reviewer_id in self.review_gates.items():
            guard.add_review_gate(capability, reviewer_id)
        registered = {rule.name: rule for rule in guard.rules}
        for schema_rule in self.schema_rules:
            existing = registered.get(schema_rule.name)
            if existing is None:
                guard.rules.add(
                    schema_rule.name,
                    schema_rule,
                    phase=schema_rule.phase,
                    capabilities={schema_rule.capability},
                    kind=Rule.SCHEMA,
                )
            elif existing.fn != schema_rule:
                raise ConfigurationError(f"the guard already has a different rule named {schema_rule.name!r}")
        self._deny_undeclared_sub_agents(guard, registered)
        for observer in self.observers:
            guard.add_observer(observer)
        self._applied.add(guard)
        problems = self._misfits(guard)
        for problem in problems:
            logger.warning("%s", problem)
        return problems

    def _deny_undeclared_sub_agents(self, guard: Guard, registered: Mapping[str, object]) -> None:
        if self.sub_agents is None:
            return
        agents = {
            ref.name for ref in guard.compiled.references.values() if ref.kind in ("agent", "remote")
        } - self.sub_agents
        name = "manifest:dependencies"
        if not agents or name in registered:
            return
        declared = ", ".join(sorted(self.sub_agents)) or "none"

        def declared_dependency(context: RuleContext) -> CheckResult:
            return CheckResult(
                False,
                f"sub-agent {context.capability!r} is not a dependency of the agent manifest {self.source} "
                f"(dependencies: {declared})",
            )

        guard.rules.add(name, declared_dependency, phase=Phase.INPUT, capabilities=agents)

    def _misfits(self, guard: Guard) -> tuple[SpecProblem, ...]:
        callable_names = {ref.name for ref in guard.compiled.references.values()}
        named = dict.fromkeys(
            [
                *(tool["id"] for tool in self.tools),
                *self.review_gates,
                *(r.capability for r in self.schema_rules),
            ]
        )
        problems = [
            SpecProblem(self.source, f"tools.{name}", f"{name!r} is not a capability of the spec")
            for name in named
            if name not in callable_names
        ]
        problems += [
            SpecProblem(self.source, "dependencies", f"sub-agent {name!r} is not a capability of the spec")
            for name in sorted(self.sub_agents or ())
            if name not in callable_names
        ]
        return tuple(problems)


@dataclass(frozen=True)
class LoadOptions:
    """How a descriptor is read (see :func:`agentguard.formats.load_descriptor`)."""

    secrets: Mapping[str, object] = field(default_factory=dict)
    strict: bool = False
    reviewer: str = "user"
    autonomous_reviewer: str | None = None
    names: Mapping[str, str] = field(default_factory=dict)
    secrets_known: bool = True
    """False when the secrets are not at hand (``agentguard validate``): a missing one is then a warning."""
