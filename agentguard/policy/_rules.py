"""Python rules beside the spec's CEL ones, and per-rule severity (shadow mode).

**Rules.** Some checks are easier in Python than in CEL (a schema, a lookup in a deny list, a call to a
classifier). Register them on the guard; they run in the same place as the spec's restriction of the same
phase, with the same effect when they fail::

    @guard.rules.rule("no-weekend-refunds", phase="input", capabilities={"refund"})
    def no_weekend_refunds(ctx: RuleContext) -> bool:
        return datetime.now().weekday() < 5

A rule returns ``True``/``False``, or a :class:`CheckResult` with a message and metadata. A rule that raises
has failed (a failing check must never let a step through).

**Severity.** Every local check has a severity, OS Protocol style: ``error`` blocks (the default),
``warning`` records the would-be denial and lets the step go on (roll out a new policy in shadow mode and
read what it would have denied), ``info`` records it as an observation only. Set it per rule kind, per
capability, and per phase; the most specific setting wins::

    Guard.from_file("agent.yaml", severity={
        "restriction": "warning",                 # every restriction in shadow mode...
        "restriction:refund": "error",            # ...except refund's, in both phases
        "capability:input": "info",               # unknown tools are only noted
        "rule:no-weekend-refunds": "warning",     # a Python rule, by name
    })

Review rejections, guardian denials and missing credentials always block: a person or a remote policy said
no, or the tool cannot run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentguard.errors import Phase, Rule
from agentguard.record import CallRecord, EngagementState

__all__ = ["CheckResult", "RegisteredRule", "RuleContext", "RuleFunction", "Rules", "Severity", "SeverityMap"]

Severity = Literal["error", "warning", "info"]
SEVERITIES: frozenset[str] = frozenset({"error", "warning", "info"})

# Kinds whose failures may be downgraded; the rest always block.
DOWNGRADABLE: frozenset[Rule] = frozenset(
    {Rule.CAPABILITY, Rule.RESTRICTION, Rule.GUARDRAIL, Rule.SHORT_CIRCUIT, Rule.RULE, Rule.SCHEMA}
)


@dataclass(frozen=True)
class RuleContext:
    """What a Python rule sees: the call, the phase, and the engagement."""

    capability: str
    phase: Phase
    inputs: Mapping[str, Any]
    outputs: Any
    state: EngagementState
    record: CallRecord | None = None
    """The call judged (a rule of a tool or agent call), whose own checks' view :meth:`view` gives."""

    @property
    def engagement_id(self) -> str:
        return self.state.id

    def view(self) -> dict[str, Any]:
        """The Engagement view as the call's checks see it (as CEL sees it): the call is the most recent of
        its tool, and an output rule sees the output it judges there, which nobody else sees until the
        output's checks let it out (decision 3)."""
        return self.state.view(self.record)


@dataclass(frozen=True)
class CheckResult:
    """The answer of a Python rule when a plain ``bool`` says too little."""

    passed: bool
    message: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


RuleFunction = Callable[[RuleContext], Any]
"""``rule(context)`` answers ``True`` / ``False`` / a :class:`CheckResult`, or an awaitable of one (an async
rule), or a generator that yields the pipeline's ``AskReviewer`` and ``CallUser`` effects and returns one (a
rule that asks a reviewer, as :func:`agentguard.checks.add_judge` does with ``route_to_review``)."""


@dataclass(frozen=True)
class RegisteredRule:
    name: str
    fn: RuleFunction
    phase: Phase
    capabilities: frozenset[str] | None
    kind: Rule = Rule.RULE

    def verdict(self, answer: object) -> CheckResult:
        """What the rule's answer means: a :class:`CheckResult` as it is, ``True`` passes, ``False`` fails,
        anything else is a failure, never a pass; so is a :class:`CheckResult` whose ``passed`` is no bool
        (``CheckResult("blocked: a secret")`` puts the message where the verdict goes, and a non-empty string
        is true to Python). (The pipeline calls the rule; this decides.)"""
        if isinstance(answer, CheckResult):
            if type(answer.passed) is bool:
                return answer
            kind = type(answer.passed).__name__
            return CheckResult(
                False, f"rule {self.name!r} returned a CheckResult whose passed is {kind}, not a bool"
            )
        if answer is True:
            return CheckResult(True, f"rule {self.name!r} passed")
        if answer is False:
            return CheckResult(False, f"rule {self.name!r} failed")
        return CheckResult(False, f"rule {self.name!r} returned {type(answer).__name__}, not a bool")

    def raised(self, error: Exception) -> CheckResult:
        """A rule that raised failed. Only the type is told: the message may quote the very output the
        failure now withholds."""
        return CheckResult(False, f"rule {self.name!r} raised {type(error).__name__}")


class Rules:
    """The Python rules of one guard."""

    def __init__(self) -> None:
        # A tuple, replaced on add: the per-call path asks whether there are any by its truth, without a frame.
        self.registered: tuple[RegisteredRule, ...] = ()
        self._cache: dict[tuple[str, Phase], tuple[RegisteredRule, ...]] = {}

    def add(
        self,
        name: str,
        fn: RuleFunction,
        *,
        phase: Phase | Literal["input", "output"] = Phase.INPUT,
        capabilities: Collection[str] | None = None,
        kind: Rule = Rule.RULE,
    ) -> RegisteredRule:
        """Register ``fn`` to run on calls of ``capabilities`` (all when ``None``) in ``phase``."""
        if any(r.name == name for r in self.registered):
            raise ValueError(f"a rule named {name!r} is already registered")
        rule = RegisteredRule(name, fn, Phase(phase), frozenset(capabilities) if capabilities else None, kind)
        self.registered = (*self.registered, rule)
        self._cache.clear()
        return rule

    def rule(
        self,
        name: str,
        *,
        phase: Phase | Literal["input", "output"] = Phase.INPUT,
        capabilities: Collection[str] | None = None,
    ) -> Callable[[RuleFunction], RuleFunction]:
        """Decorator form of :meth:`add`."""

        def register(fn: RuleFunction) -> RuleFunction:
            self.add(name, fn, phase=phase, capabilities=capabilities)
            return fn

        return register

    def for_call(self, capability: str, phase: Phase) -> tuple[RegisteredRule, ...]:
        """The rules that apply to a call of ``capability`` in ``phase`` (cached: the per-call path)."""
        key = (capability, phase)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = tuple(
                r
                for r in self.registered
                if r.phase is phase and (r.capabilities is None or capability in r.capabilities)
            )
        return found

    def __iter__(self) -> Iterator[RegisteredRule]:
        return iter(self.registered)

    def __len__(self) -> int:
        return len(self.registered)

    def __bool__(self) -> bool:
        return bool(self.registered)


class SeverityMap:
    """Severity per rule kind / capability / phase (or per Python rule name), most specific first.

    Keys: ``"<kind>"``, ``"<kind>:<capability>"``, ``"<kind>:<phase>"``, ``"<kind>:<capability>:<phase>"``;
    a Python rule is addressed as ``"rule:<rule name>"``. Unknown kinds and severities are refused at
    construction, so a typo cannot silently leave a rule blocking (or not).
    """

    def __init__(self, settings: Mapping[str, Severity] | None = None) -> None:
        self._settings: dict[str, Severity] = {}
        kinds = {r.value for r in Rule}
        for key, value in (settings or {}).items():
            if value not in SEVERITIES:
                raise ValueError(f"severity of {key!r} must be error, warning or info, not {value!r}")
            kind = key.split(":", 1)[0]
            if kind not in kinds:
                raise ValueError(
                    f"unknown rule kind {kind!r} in severity key {key!r} (one of {sorted(kinds)})"
                )
            if Rule(kind) not in DOWNGRADABLE and value != "error":
                raise ValueError(f"{kind} decisions always block; their severity cannot be {value!r}")
            self._settings[key] = value

    def __bool__(self) -> bool:
        return bool(self._settings)

    def of(
        self, kind: Rule, capability: str | None, phase: Phase | None, name: str | None = None
    ) -> Severity:
        if not self._settings:
            return "error"
        k = kind.value
        candidates = []
        if name:
            candidates.append(f"{k}:{name}")
        if capability and phase:
            candidates.append(f"{k}:{capability}:{phase.value}")
        if capability:
            candidates.append(f"{k}:{capability}")
        if phase:
            candidates.append(f"{k}:{phase.value}")
        candidates.append(k)
        for key in candidates:
            if key in self._settings:
                return self._settings[key]
        return "error"
