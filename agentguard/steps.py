"""Step kinds an adapter reports besides tool calls and guardrailed messages.

Each class is one AOS step method; pass an instance to :meth:`agentguard.Engagement.report` (or ``areport``)
and the step is recorded in the engagement and, when a guardian is configured, put to it::

    from agentguard import steps

    with guard.engagement(user=user) as eng:
        eng.report(steps.KnowledgeRetrieval(query="refund policy", results=[{"id": "kb-1", "content": "..."}]))
        eng.report(steps.MCP(message={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))

``report`` returns the params of the guardian's replacement request when it answers ``modify`` (``None``
otherwise) and raises :class:`~agentguard.GuardianDenied` on ``deny``: the adapter must then not carry the
step out (not attach the knowledge, not send the A2A message, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "A2A",
    "MCP",
    "A2AMethod",
    "AgentTrigger",
    "KnowledgeRetrieval",
    "MemoryContextRetrieval",
    "MemoryStore",
    "Message",
    "Step",
]

A2AMethod = Literal[
    "message/send",
    "message/stream",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/resubscribe",
    "tasks/cancel",
    "tasks/get",
]


@dataclass(frozen=True)
class Message:
    """``steps/message``: a user input, an agent answer, or a system message (not guardrailed here)."""

    role: Literal["user", "agent", "system"]
    text: str
    citation: Sequence[Mapping[str, Any]] = ()
    reasoning: str | None = None

    method = "steps/message"


@dataclass(frozen=True)
class KnowledgeRetrieval:
    """``steps/knowledgeRetrieval``: results of a retriever, before they reach the model."""

    results: Sequence[Mapping[str, Any]]
    query: str | None = None
    keywords: Sequence[str] | None = None
    reasoning: str | None = None

    method = "steps/knowledgeRetrieval"

    def params(self) -> dict[str, Any]:
        knowledge: dict[str, Any] = {"results": [dict(r) for r in self.results]}
        if self.query is not None:
            knowledge["query"] = self.query
        if self.keywords is not None:
            knowledge["keywords"] = list(self.keywords)
        return _with_reasoning({"knowledgeStep": knowledge}, self.reasoning)


@dataclass(frozen=True)
class MemoryStore:
    """``steps/memoryStore``: what the agent is about to store in memory (JSON memory as strings)."""

    memory: Sequence[str]
    reasoning: str | None = None

    method = "steps/memoryStore"

    def params(self) -> dict[str, Any]:
        return _with_reasoning({"memory": list(self.memory)}, self.reasoning)


@dataclass(frozen=True)
class MemoryContextRetrieval:
    """``steps/memoryContextRetrieval``: memory retrieved into the context, before the model sees it."""

    memory: Sequence[str]
    reasoning: str | None = None

    method = "steps/memoryContextRetrieval"

    def params(self) -> dict[str, Any]:
        return _with_reasoning({"memory": list(self.memory)}, self.reasoning)


@dataclass(frozen=True)
class AgentTrigger:
    """``steps/agentTrigger``: an autonomous activation (an email arrived, a schedule fired)."""

    event_type: str
    event_id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    method = "steps/agentTrigger"

    def params(self) -> dict[str, Any]:
        trigger: dict[str, Any] = {
            "type": "autonomous",
            "event": {"type": self.event_type, "id": self.event_id},
            "content": [{"kind": "text", "text": self.text}],
        }
        if self.metadata:
            trigger["metadata"] = dict(self.metadata)
        return {"trigger": trigger}


@dataclass(frozen=True)
class A2A:
    """An A2A request about to be sent (``response=False``) or a response just received (``response=True``).

    The AOS method is the A2A method itself; ``payload`` is the raw A2A JSON-RPC message.
    """

    a2a_method: A2AMethod
    payload: Mapping[str, Any]
    response: bool = False
    reasoning: str | None = None

    @property
    def method(self) -> str:
        return self.a2a_method

    def params(self) -> dict[str, Any]:
        return _with_reasoning({"payload": dict(self.payload)}, None if self.response else self.reasoning)


@dataclass(frozen=True)
class MCP:
    """``protocols/MCP``: an MCP message going to a server, or coming back from it."""

    message: Mapping[str, Any]
    reasoning: str | None = None

    method = "protocols/MCP"

    def params(self) -> dict[str, Any]:
        return _with_reasoning({"message": dict(self.message)}, self.reasoning)


Step = Message | KnowledgeRetrieval | MemoryStore | MemoryContextRetrieval | AgentTrigger | A2A | MCP


def _with_reasoning(params: dict[str, Any], reasoning: str | None) -> dict[str, Any]:
    if reasoning:
        params["reasoning"] = reasoning
    return params
