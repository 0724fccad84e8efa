"""Pydantic models of an OpenAgentSpec agent document (``kind: openagentspec:v1/agent``).

The field names are exactly the spec's. Every model is frozen (a loaded policy must not change under a
running engagement), forbids unknown fields (a misspelt ``colect_results`` would otherwise silently fall
back to its default and weaken the policy), and validates strictly: ``"false"`` is not a boolean and
``3.0`` is not an ``int`` -- in a security policy a value of the wrong type is a mistake, not a hint.

CEL expressions are kept as text here; :func:`agentguard.spec.compile_spec` compiles them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr

from ._names import parse_reference, validate_name
from ._yaml import lone_surrogate

__all__ = [
    "KIND",
    "AgentSpec",
    "Capability",
    "Guardrail",
    "Guardrails",
    "Lifespan",
    "Restriction",
]

KIND = "openagentspec:v1/agent"


def _check_name(value: str) -> str:
    reason = validate_name(value)
    if reason is not None:
        raise ValueError(f"invalid name {value!r}: {reason}")
    return value


def _check_reference(value: str) -> str:
    parse_reference(value)
    return value


def _check_text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    surrogate = lone_surrogate(value)  # a spec built in code is not read by read_yaml, which refuses these
    if surrogate is not None:
        raise ValueError(surrogate)
    return value


def _check_agent_names(capabilities: dict[str, Capability]) -> dict[str, Capability]:
    """Refuse a remote agent whose name another capability also uses.

    The runtime calls a remote agent ``oagent://host/path/name``, and the Engagement records it, by its name
    alone (``recent["name"]``), so a second capability of that name -- another remote agent, the local
    ``oagent://name`` or a bare ``name`` -- would take over its calls and its restrictions would never apply.
    A bare name and ``oagent://name`` may share a name: the spec itself tells the tool from the agent.
    """
    remote: dict[str, str] = {}
    others: dict[str, str] = {}
    for key in capabilities:
        reference = parse_reference(key)
        first = remote.get(reference.name) or (
            others.get(reference.name) if reference.kind == "remote" else None
        )
        if first is not None:
            raise ValueError(
                f"{first!r} and {key!r} both name the agent {reference.name!r}; a remote agent is called and "
                f'recorded by its name (recent["{reference.name}"]), so no other capability may use that name'
            )
        (remote if reference.kind == "remote" else others).setdefault(reference.name, key)
    return capabilities


def _none_as_empty(value: object) -> object:
    # `send-email:` with nothing after it is YAML null; the spec's defaults make that a complete capability.
    return {} if value is None else value


_Name = Annotated[str, AfterValidator(_check_name)]
"""A tool or agent name (DNS subdomain rule)."""

_ReferenceText = Annotated[str, AfterValidator(_check_reference)]
"""A reference to a tool or agent in one of the three forms of :func:`~agentguard.spec.parse_reference`."""

_Text = Annotated[str, AfterValidator(_check_text)]
"""A string the spec requires to carry content: empty, whitespace-only or not valid Unicode is rejected."""


class _SpecModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Restriction(_SpecModel):
    """Conditions checked before (input) or after (output) a capability is invoked."""

    require_review: _Text | None = None
    """Who must approve the step: a user identity or an agent reference the server understands."""

    assertion: _Text | None = None
    """A CEL expression over the Engagement (``started_at``, ``user``, ``recent``, ``history``)."""


class Capability(_SpecModel):
    """What the agent may do with one tool or agent. A capability with no fields is valid: all defaults."""

    collect_results: bool = True
    """Append the tool's output to the Engagement."""

    user_identity: bool = True
    """Access the tool as the calling user."""

    static_identity: _Text | None = None
    """Credential set to use when ``user_identity`` is false or the engagement has no user."""

    input_restriction: Restriction | None = None
    output_restriction: Restriction | None = None


class Guardrail(_SpecModel):
    """A tool invoked on every user input (or model output) whose result a CEL assertion must accept."""

    tool_name: _Name
    assertion: _Text
    """A CEL expression over the guardrail tool's result, bound to the variable ``output``."""


class Guardrails(_SpecModel):
    """The input guardrail runs on every user input, the output guardrail on every model response."""

    input: Guardrail | None = None
    output: Guardrail | None = None


class Lifespan(_SpecModel):
    """How long the agent's memory lives, and how far it may loop."""

    retain_memory: bool = True
    """Whether context for the model may be kept across engagements."""

    short_circuit: Annotated[int, Field(ge=1)] | None = None
    """Maximum number of times a block of tool calls may repeat back to back."""


class AgentSpec(_SpecModel):
    """An OpenAgentSpec agent document.

    ``capabilities`` is keyed by references (``lookup-order``, ``oagent://billing-agent``,
    ``oagent://host/path/agent``); use :attr:`agentguard.spec.CompiledSpec.references` for the parsed form.
    """

    kind: Literal["openagentspec:v1/agent"]
    name: _Name
    description: _Text
    intent: _Text
    owner: _Text
    capabilities: Annotated[
        dict[_ReferenceText, Annotated[Capability, BeforeValidator(_none_as_empty)]],
        AfterValidator(_check_agent_names),
    ]
    guardrails: Guardrails | None = None
    exposes: dict[str, _Text] | None = None
    """Key -> CEL selection over the Engagement, returned to the calling user alongside the result."""
    lifespan: Lifespan | None = None

    # 1-based (line, column) of each field in the file it was parsed from, keyed by path; filled by
    # parse_spec so that compile_spec can point CEL errors at the right line. Not part of the document.
    _positions: dict[tuple[object, ...], tuple[int, int]] = PrivateAttr(default_factory=dict)
    _source: str | None = PrivateAttr(default=None)
