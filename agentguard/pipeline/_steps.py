"""Build AOS step requests (wire JSON) from what the Guard knows.

These builders produce plain camelCase dicts, not pydantic models: they run on the per-step path whenever a
guardian is configured, and a dict costs a fraction of a validated model. Their output is validated against
:mod:`agentguard.aos` and the published AOS JSON Schema in the test suite.
"""

from __future__ import annotations

import inspect
import itertools
import json
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Union, get_type_hints

from agentguard.record import EngagementState, StepRecord, new_id, to_plain

__all__ = ["AgentInfo", "StepBuilder", "new_step", "tool_definition"]

_ids = itertools.count(1)


@dataclass(frozen=True)
class AgentInfo:
    """The AOS ``Agent`` descriptor fields a spec does not carry. Defaults come from the spec.

    ``name``/``id`` default to the spec's ``name``, ``instructions`` to its ``intent``, ``description`` to its
    ``description``, ``provider`` to its ``owner``.
    """

    name: str | None = None
    id: str | None = None
    version: str = "0.0.0"
    description: str | None = None
    instructions: str | None = None
    provider_name: str | None = None
    provider_url: str = ""
    model: Mapping[str, Any] | None = None
    mcp_servers: Sequence[Mapping[str, Any]] = ()
    resources: Sequence[Mapping[str, Any]] = ()
    organization: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tools: Sequence[Mapping[str, Any]] = ()  # declared AOS ToolDefinitions; they win over signatures


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def _json_type(annotation: Any) -> str | None:
    """The AOS argument type of a Python annotation (``X | None`` counts as ``X``); ``None`` if unclear."""
    if isinstance(annotation, types.UnionType) or getattr(annotation, "__origin__", None) is Union:
        options = [a for a in annotation.__args__ if a is not type(None)]
        return _json_type(options[0]) if len(options) == 1 else None
    origin = getattr(annotation, "__origin__", None)
    return _JSON_TYPES.get(annotation) or _JSON_TYPES.get(origin)


def _param_docs(doc: str) -> dict[str, str]:
    """Argument descriptions from a Google/NumPy/Sphinx style docstring (best effort, never raises)."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    in_args = False
    for raw in lines:
        line = raw.strip()
        if line.lower() in ("args:", "arguments:", "parameters:", "params:"):
            in_args = True
            continue
        if line.startswith(":param "):
            name, _, desc = line[len(":param ") :].partition(":")
            out[name.split()[-1]] = desc.strip()
            continue
        if in_args:
            if not line:
                continue
            if line.endswith(":") and " " not in line:
                in_args = False
                continue
            name, sep, desc = line.partition(":")
            if sep and name.strip().split(" ")[0].isidentifier():
                out[name.strip().split(" ")[0]] = desc.strip()
    return out


def tool_definition(name: str, fn: Callable[..., Any], *, kind: str = "tool") -> dict[str, Any]:
    """AOS ``ToolDefinition`` read from a function's signature, type hints and docstring."""
    sig = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception:
        hints = {}
    doc = inspect.getdoc(fn) or ""
    described = _param_docs(doc)
    arguments = []
    for param in sig.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        arg: dict[str, Any] = {"name": param.name, "required": param.default is param.empty}
        jtype = _json_type(hints.get(param.name))
        if jtype:
            arg["type"] = jtype
        if param.name in described:
            arg["description"] = described[param.name]
        arguments.append(arg)
    definition: dict[str, Any] = {
        "name": name,
        "id": name,
        "type": "agent_call" if kind == "agent" else "function_call",
        "arguments": arguments,
        "outputs": None,
    }
    summary = doc.split("\n\n", 1)[0].strip()
    if summary:
        definition["description"] = summary
    out_type = _json_type(hints.get("return"))
    if out_type:
        definition["outputs"] = [{"name": "result", "type": out_type}]
    return definition


def _text_parts(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    text = value if isinstance(value, str) else json.dumps(to_plain(value), default=str)
    return [{"kind": "text", "text": text}]


class StepBuilder:
    """Builds the AOS request for each step of one Guard's engagements."""

    def __init__(self, agent: Callable[[], dict[str, Any]]) -> None:
        self._agent = agent

    def context(self, state: EngagementState, step: StepRecord, *, own_step: bool = False) -> dict[str, Any]:
        """AOS ``StepContext``: agent, session (= engagement), turn and step ids, UTC time, user.

        ``own_step``: this AOS step is a later one of the same record (a ``steps/toolCallResult`` after its
        ``steps/toolCallRequest``): it gets a step id and a timestamp of its own, and the two are linked by
        ``executionId``, so that a guardian keying on ``stepId`` never sees two steps as one.
        """
        agent = self._agent()
        step_id, at = (new_id(), datetime.now(UTC)) if own_step else (step.step_id, step.timestamp)
        ctx: dict[str, Any] = {
            "agent": agent,
            "session": {"id": state.id},
            "turnId": step.turn_id,
            "stepId": step_id,
            "timestamp": at.isoformat().replace("+00:00", "Z"),
        }
        user = state.user
        if user is not None:
            u: dict[str, Any] = {"id": user.id}
            if user.name:
                u["name"] = user.name
            if user.email:
                u["email"] = user.email
            # Required by the AOS text: the user's own, else the agent's, else an explicit "unknown".
            u["organization"] = (
                {"id": user.organization}
                if user.organization
                else agent.get("organization") or {"id": "unknown"}
            )
            if user.metadata:
                u["metadata"] = to_plain(user.metadata)
            ctx["user"] = u
        return ctx

    @staticmethod
    def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": f"ag-{next(_ids)}", "method": method, "params": params}

    def tool_call_request(
        self,
        state: EngagementState,
        step: StepRecord,
        tool: str,
        inputs: Mapping[str, Any],
        reasoning: str | None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "context": self.context(state, step),
            "toolCallRequest": {
                "executionId": step.call_id,
                "toolId": tool,
                "inputs": [{"name": k, "value": to_plain(v)} for k, v in inputs.items()],
            },
        }
        if reasoning:
            params["reasoning"] = reasoning
        return self.request("steps/toolCallRequest", params)

    def tool_call_result(
        self, state: EngagementState, step: StepRecord, outputs: Any, *, is_error: bool
    ) -> dict[str, Any]:
        params = {
            "context": self.context(state, step, own_step=True),
            "executionId": step.call_id,
            "result": {"outputs": _text_parts(outputs), "isError": is_error},
        }
        return self.request("steps/toolCallResult", params)

    def message(
        self,
        state: EngagementState,
        step: StepRecord,
        role: str,
        text: str,
        *,
        citation: Sequence[Mapping[str, Any]] = (),
        reasoning: str | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "context": self.context(state, step),
            "message": {"id": step.step_id, "role": role, "content": [{"kind": "text", "text": text}]},
            "citation": [dict(c) for c in citation],
        }
        if reasoning:
            params["reasoning"] = reasoning
        return self.request("steps/message", params)

    def generic(
        self, state: EngagementState, step: StepRecord, method: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Any other step kind: ``params`` as given, with the step context added."""
        body = {"context": self.context(state, step), **to_plain(params)}
        return self.request(method, body)

    def passthrough(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """A2A and MCP methods carry the raw protocol message; no step context is required."""
        return self.request(method, dict(params))


def new_step(
    state: EngagementState, kind: str, *, name: str | None = None, call_id: str | None = None
) -> StepRecord:
    """A fresh step record appended to the engagement."""
    step = StepRecord(kind, None, state.turn_id, None, name, call_id)
    state.steps.append(step)
    return step
