"""The compiled policy of one agent: capabilities, assertions, guardrails, exposes, lifespan.

Built once per Guard from a :class:`~agentguard.spec.CompiledSpec`; every lookup on the per-call path is a
dict access. Pure decisions only: nothing here calls a tool, a reviewer or the network.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentguard.cel import CelEvaluationError, CelProgram, quick_closure
from agentguard.record import ViewPlan
from agentguard.spec import CompiledSpec, Guardrail, Reference

__all__ = ["HOLDS", "Assertion", "CapabilityRule", "GuardrailRule", "Policy", "UnknownCapability"]

HOLDS = "assertion holds"
"""The reason an assertion that passed gives (the same every time: its allow decision is shared)."""

UnknownCapability = Literal["deny", "allow", "observe"]


@dataclass(frozen=True, slots=True)
class Assertion:
    """One compiled CEL assertion and the part of the Engagement view it reads."""

    program: CelProgram
    plan: ViewPlan
    field: str
    quick: Callable[[Mapping[str, Any]], Any] | None = None
    """The program's ``quick`` closure when its backend offers one: a pass it answers (``True``) is a pass
    without :meth:`check`'s frames. A :class:`~agentguard.cel.CelEvaluationError` it raises (the default
    backend's closures raise one only when a bound of the evaluation budget is hit) is the answer
    :meth:`answer` would give, from the same closure: it is :meth:`judge`-d as it is, not evaluated again.
    Anything else, another exception included, is left to :meth:`check`, which evaluates from scratch. The
    direct path of a call uses it (under the engagement's lock, where the bound record cannot change)."""

    @classmethod
    def of(cls, program: CelProgram, field: str) -> Assertion:
        return cls(program, ViewPlan.of(program), field, quick_closure(program))

    @property
    def source(self) -> str:
        return self.program.source

    def check(self, variables: Mapping[str, Any], *, values: bool = False) -> tuple[bool, str]:
        """Decision 4: only a boolean ``true`` passes; an error or a non-boolean is a failed assertion.

        A failure names the clause of ``a && b && c`` that failed and, with ``values`` (for data nobody
        withholds: an input restriction), the two sides it compared. (:meth:`answer` then :meth:`judge`.)
        """
        return self.judge(self.answer(variables), variables, values=values)

    def answer(self, variables: Mapping[str, Any]) -> Any:
        """The program's value for ``variables``, or the exception its evaluation raised: the one evaluation a
        check makes, which :meth:`judge` may then read twice (with and without the values compared) without
        running the expression again, nor hitting a bound of its budget again."""
        try:
            return self.program.evaluate(variables)
        except Exception as exc:  # an engine bug must not let a step through: judged a failure
            return exc  # no CEL value is an exception object

    def judge(self, answer: Any, variables: Mapping[str, Any], *, values: bool = False) -> tuple[bool, str]:
        """:meth:`check` for an ``answer`` already had: from :meth:`answer`, or the exception a ``quick``
        closure raised (:class:`~agentguard.cel.CelEvaluationError`, which :meth:`answer` would raise again
        from the same closure). ``variables`` serve only to explain a ``false``."""
        if isinstance(answer, CelEvaluationError):
            return False, f"assertion could not be evaluated: {answer.message}"
        if isinstance(answer, Exception):
            return False, f"assertion could not be evaluated: {type(answer).__name__}"
        if answer is True:
            return True, HOLDS
        if answer is not False:
            return False, f"assertion yielded {type(answer).__name__}, not a boolean"
        try:
            why = self.program.explain(variables, values=values)
        except Exception:  # explaining is a courtesy: the denial stands without it
            why = None
        return False, f"assertion is false: {why}" if why else "assertion is false"

    def select(self, variables: Mapping[str, Any]) -> Any:
        """Evaluate as a selection (``exposes``): the value, or why it could not be evaluated.

        A selection that fails is ``{"error": <why>, "expression": <its CEL>}`` -- a JSON object, so it
        travels as it is to a server's engagement state and to a calling agent -- rather than ``None``, which
        a reader could not tell from a selected ``null``.
        """
        try:
            return self.program.evaluate(variables)
        except CelEvaluationError as exc:
            return {"error": exc.message, "expression": self.source}


@dataclass(frozen=True, slots=True)
class CapabilityRule:
    """What the spec says about one capability, ready for the per-call path."""

    key: str
    reference: Reference
    collect_results: bool
    user_identity: bool
    static_identity: str | None
    input_assertion: Assertion | None
    output_assertion: Assertion | None
    input_review: str | None
    output_review: str | None

    allow_reason: str = field(init=False)  # the reason of every allowed call's decision, formatted once

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_reason", f"capability {self.key!r}")


@dataclass(frozen=True, slots=True)
class GuardrailRule:
    tool_name: str
    assertion: Assertion


def _assertion(program: CelProgram | None, field: str) -> Assertion | None:
    return Assertion.of(program, field) if program else None


def _guardrail(
    which: Literal["input", "output"], guardrail: Guardrail | None, program: CelProgram | None
) -> GuardrailRule | None:
    """The rule of the input or output guardrail, when the spec has one (and so its compiled assertion)."""
    assertion = _assertion(program, f"guardrails.{which}.assertion")
    return GuardrailRule(guardrail.tool_name, assertion) if guardrail and assertion else None


class Policy:
    """The spec, compiled and indexed for lookups by name."""

    def __init__(self, compiled: CompiledSpec) -> None:
        spec = compiled.spec
        self.compiled = compiled
        self.spec = spec
        self.name = spec.name
        self._bare: dict[str, CapabilityRule] = {}
        self._agents: dict[str, CapabilityRule] = {}
        self._remote: dict[str, CapabilityRule] = {}
        for key, cap in spec.capabilities.items():
            ref = compiled.references[key]
            inp, out = cap.input_restriction, cap.output_restriction
            in_prog = compiled.input_assertions.get(key)
            out_prog = compiled.output_assertions.get(key)
            rule = CapabilityRule(
                key=key,
                reference=ref,
                collect_results=cap.collect_results,
                user_identity=cap.user_identity,
                static_identity=cap.static_identity,
                input_assertion=_assertion(in_prog, f"capabilities.{key}.input_restriction.assertion"),
                output_assertion=_assertion(out_prog, f"capabilities.{key}.output_restriction.assertion"),
                input_review=inp.require_review if inp else None,
                output_review=out.require_review if out else None,
            )
            if ref.kind == "remote":
                self._remote[ref.name] = rule
            else:
                (self._agents if ref.kind == "agent" else self._bare)[ref.name] = rule
        self._twice = frozenset(self._agents).intersection(self._bare)
        """Names with a capability as ``name`` and another as ``oagent://name``: see :meth:`two_rules`."""
        guardrails = spec.guardrails
        self.input_guardrail = _guardrail(
            "input", guardrails.input if guardrails else None, compiled.guardrail_input
        )
        self.output_guardrail = _guardrail(
            "output", guardrails.output if guardrails else None, compiled.guardrail_output
        )
        self.exposes = {key: Assertion.of(prog, f"exposes.{key}") for key, prog in compiled.exposes.items()}
        lifespan = spec.lifespan
        self.short_circuit: int | None = lifespan.short_circuit if lifespan else None
        self.retain_memory: bool = lifespan.retain_memory if lifespan else True
        self.guardrail_tools = frozenset(
            g.tool_name for g in (self.input_guardrail, self.output_guardrail) if g is not None
        )

    def capability_for(self, name: str, kind: str, tool_names: Container[str]) -> CapabilityRule | None:
        """The capability a call of tool or agent ``name`` falls under (tool-before-agent for bare names).

        A remote agent (``oagent://host/path/name``) is called, and recorded, by its agent name.
        """
        if kind == "tool":
            return self._bare.get(name)
        if name in self._twice and name not in tool_names:  # :meth:`two_rules`, without its frame
            return None
        rule = self._agents.get(name)
        if rule is None and name not in tool_names:
            rule = self._bare.get(name)
        return rule if rule is not None else self._remote.get(name)

    def knows(self, name: str) -> bool:
        """Is ``name`` a capability of the spec (as a tool, an agent or a remote agent) or a guardrail tool? A
        name the spec does not know is the caller's to write (often the model's): see ``short_circuit``."""
        return (
            name in self._bare or name in self._agents or name in self._remote or name in self.guardrail_tools
        )

    def two_rules(self, name: str, kind: str, tool_names: Container[str]) -> bool:
        """Does the spec give agent ``name`` two capabilities? ``name`` and ``oagent://name`` both refer to the
        agent when no tool is named ``name``, and may restrict it differently. Which tools exist is known only
        when the agent is called, so the spec loads; :meth:`capability_for` finds no capability for such a
        call, and the pipeline denies it whatever ``unknown_capability`` says: either rule alone could let
        through what the other forbids."""
        return kind != "tool" and name in self._twice and name not in tool_names

    @property
    def remote_agents(self) -> dict[str, Reference]:
        """Remote agent references of the spec, by agent name."""
        return {name: rule.reference for name, rule in self._remote.items()}

    @property
    def capability_keys(self) -> list[str]:
        return list(self.spec.capabilities)
