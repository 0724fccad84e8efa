"""What agentguard's spans are called and what they carry, as plain functions of the step records.

The OpenTelemetry GenAI conventions (development status) name the pieces. An engagement turn is an
``invoke_agent {agent}`` span; a tool or sub-agent call is an ``execute_tool {tool}`` span, which encloses the
tool's own run. Every other step -- a user message or agent answer (guardrailed or only reported), retrieved
knowledge or memory, memory about to be stored, a trigger, an A2A or MCP message -- is agentguard judging
content before the host lets it move on: the conventions call that ``apply_guardrail {target type}``, with the
target type saying what is judged (``llm_input``, ``knowledge_result``, ...).

Every decision about a step is an ``agentguard.decision`` event on the step's span. Content (tool arguments
and results, message text, retrieved documents) goes into opt-in attributes only; the functions that read
content are the ones named ``*_content`` and the observer calls them only when capture is on.

What a model, a peer or a host chooses is never recorded as it came where it is not content: a tool name
only once a capability of the spec allowed it (:func:`names_tool`), a step kind only when it is an AOS method
(:func:`step_kind`), and every string only as valid UTF-8 (:func:`utf8`, :func:`clean`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.util.types import AttributeValue

from agentguard.aos import A2A_METHODS
from agentguard.aos import known_method as step_kind
from agentguard.aos import valid_utf8 as utf8
from agentguard.errors import Rule
from agentguard.record import CallRecord, Decision, EngagementState, Outcome, StepRecord

__all__ = [
    "DECISION_EVENT",
    "TOOL_STEP",
    "UNKNOWN_TOOL",
    "clean",
    "decision_attributes",
    "guardrail_decision",
    "hide",
    "names_tool",
    "step_content",
    "step_kind",
    "step_span",
    "tool_content",
    "tool_span_name",
    "turn_span",
    "unnamed_tool",
    "utf8",
]

TOOL_STEP = "steps/toolCallRequest"
DECISION_EVENT = "agentguard.decision"

UNKNOWN_TOOL = "_unknown"
"""What spans say of a tool (``gen_ai.tool.name``, the span's name) until a capability of the spec allows it.

Not a valid capability name (spec names are lowercase letters, digits, '-' and '.'), and reserved for a call
(names starting with '_' are refused): it stands for no real tool."""

_TARGETS = {
    "steps/knowledgeRetrieval": "knowledge_result",
    "steps/memoryStore": "memory_store",
    "steps/memoryContextRetrieval": "memory_retrieve",
    "steps/agentTrigger": "agent_trigger",
    "protocols/MCP": "mcp_message",
}
_MESSAGE_TARGETS = {"user": "llm_input", "agent": "llm_output"}


def names_tool(decision: Decision) -> bool:
    """Does ``decision`` put its step's tool under the spec (a capability of the spec, or a guardrail tool,
    allowed it)? Only then is the tool's name recorded.

    The name of a call is the caller's, and an adapter's caller is often the model: a name no capability
    allows (an unknown tool, whatever ``unknown_capability`` says, a reserved one, one refused before the
    capability was looked up) would be a new span name and a new value of ``gen_ai.tool.name`` each time
    (unbounded cardinality where a backend derives metrics from span names), and its text, lone surrogates
    and control characters included, would leave the process with content capture off."""
    return decision.rule is Rule.CAPABILITY and decision.outcome is Outcome.ALLOW and decision.in_spec


def unnamed_tool(step: StepRecord) -> str | None:
    """The name to keep off a tool step's span: the caller's, until a decision :func:`names_tool`.

    ``None`` for a step of another kind, and for a tool step the spec's capability has allowed (a step
    resumed after a review carries that decision already).
    """
    if step.kind != TOOL_STEP or any(names_tool(d) for d in step.decisions):
        return None
    return step.name or ""


def tool_span_name(tool: str) -> str:
    return f"execute_tool {tool}"


def hide(text: str, name: str | None) -> str:
    """``text`` (a reason, a status) without the quoted ``name`` (an unknown tool's: :func:`unnamed_tool`),
    as valid UTF-8. agentguard's reasons quote a name as ``repr`` does."""
    if name and text:
        text = text.replace(repr(name), repr(UNKNOWN_TOOL))
    return utf8(text)


def _target(step: StepRecord) -> str:
    """``gen_ai.security.target.type`` of a non-tool step (free-form in the conventions; theirs where one fits)."""
    if step.kind == "steps/message":
        return _MESSAGE_TARGETS.get(step.payload.get("role") or step.name or "", "message")
    if step.kind in A2A_METHODS:
        return "a2a_message"
    kind = step_kind(step.kind)
    return _TARGETS.get(kind, kind)


def _agent(agent_name: str | None, agent_id: str | None, state: EngagementState) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {"gen_ai.conversation.id": state.id}
    if agent_name is not None:
        attributes["gen_ai.agent.name"] = agent_name
    if agent_id is not None:
        attributes["gen_ai.agent.id"] = agent_id
    return attributes


def turn_span(
    agent_name: str | None, agent_id: str | None, state: EngagementState
) -> tuple[str, dict[str, AttributeValue]]:
    """Name and attributes of the span of one engagement turn."""
    attributes = _agent(agent_name, agent_id, state)
    attributes["gen_ai.operation.name"] = "invoke_agent"
    attributes["agentguard.turn.id"] = state.turn_id
    return utf8("invoke_agent" if agent_name is None else f"invoke_agent {agent_name}"), clean(attributes)


def step_span(
    agent_name: str | None, agent_id: str | None, state: EngagementState, step: StepRecord, hidden: str | None
) -> tuple[str, dict[str, AttributeValue]]:
    """Name and attributes of a step's span, as known when the step starts (samplers see these).

    ``hidden``: the step's :func:`unnamed_tool` (a tool step is ``execute_tool _unknown`` until its capability
    is allowed; the observer names it then)."""
    attributes = _agent(agent_name, agent_id, state)
    attributes["agentguard.step.kind"] = step_kind(step.kind)
    attributes["agentguard.step.id"] = step.step_id
    if step.kind == TOOL_STEP:
        tool = UNKNOWN_TOOL if hidden is not None else step.name or UNKNOWN_TOOL
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = tool
        if step.call_id:
            attributes["gen_ai.tool.call.id"] = step.call_id
        return tool_span_name(tool), clean(attributes)
    target = _target(step)
    attributes["gen_ai.operation.name"] = "apply_guardrail"
    attributes["gen_ai.security.target.type"] = target
    return f"apply_guardrail {target}", clean(attributes)


def decision_attributes(decision: Decision, hidden: str | None = None) -> dict[str, AttributeValue]:
    """The attributes of the ``agentguard.decision`` event of one decision (no content: reasons are ours).

    ``hidden``: a name the reason may quote that is not to be recorded (:func:`unnamed_tool`)."""
    # str() of a StrEnum is its value, without the Python-level property ``.value`` is (four decisions a step).
    attributes: dict[str, AttributeValue] = {
        "agentguard.decision.rule": str(decision.rule),
        "agentguard.decision.outcome": str(decision.outcome),
        "agentguard.decision.severity": decision.severity,
    }
    if decision.phase is not None:
        attributes["agentguard.decision.phase"] = str(decision.phase)
    if decision.reason:
        attributes["agentguard.decision.reason"] = hide(decision.reason, hidden)
    if decision.expression is not None:
        attributes["agentguard.decision.expression"] = utf8(decision.expression)
    return attributes


def guardrail_decision(step: StepRecord, blocked: Decision | None) -> tuple[str, str | None]:
    """``gen_ai.security.decision.type`` of a non-tool step and the reason to give when it is not ``allow``."""
    if blocked is not None:
        return "deny", blocked.reason or None
    modified = next((d for d in step.decisions if d.outcome is Outcome.MODIFY), None)
    if modified is not None:
        return "modify", modified.reason or None
    warned = next((d for d in step.decisions if d.outcome is Outcome.WARN), None)
    if warned is not None:
        return "warn", warned.reason or None
    return "allow", None


def _text(value: Any) -> str:
    return utf8(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))


def clean(attributes: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    """``attributes`` with every string made valid UTF-8 (:func:`utf8`): ids, names and reasons are the host's,
    a model's or a guardian's to write."""
    for key, value in attributes.items():
        if isinstance(value, str) and not value.isascii():
            attributes[key] = utf8(value)
    return attributes


def tool_content(record: CallRecord, *, with_result: bool) -> dict[str, AttributeValue]:
    """CONTENT. The arguments of a call and, when ``with_result``, its result.

    The caller decides ``with_result``: a withheld or failed output is never passed on (decision 3).
    """
    attributes: dict[str, AttributeValue] = {"gen_ai.tool.call.arguments": _text(record.inputs)}
    if with_result and record.outputs is not None:
        attributes["gen_ai.tool.call.result"] = _text(record.outputs)
    return attributes


def step_content(step: StepRecord) -> dict[str, AttributeValue]:
    """CONTENT. What a non-tool step judged, from the AOS request built for it (when one was built).

    A message gives its text; other steps their AOS ``params`` without the ``context`` (agent and user
    descriptors are not content of the step).
    """
    if not step.aos:
        return {}
    params = step.aos[0].get("params")
    if not isinstance(params, Mapping):
        return {}
    message = params.get("message")
    if step.kind == "steps/message" and isinstance(message, Mapping):
        parts = message.get("content")
        if isinstance(parts, list):
            text = "".join(
                p["text"] for p in parts if isinstance(p, Mapping) and isinstance(p.get("text"), str)
            )
            return {"gen_ai.security.content.input.value": utf8(text)}
    judged = {key: value for key, value in params.items() if key != "context"}
    return {"gen_ai.security.content.input.value": _text(judged)}
