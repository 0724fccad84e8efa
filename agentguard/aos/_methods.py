"""The AOS methods (section 4): one ``params`` model and one typed request model per method.

A request model is the JSON-RPC request envelope with ``method`` pinned to one name and ``params`` typed,
so that ``AOSRequest`` (the union of all of them) is picked by ``method`` alone. An A2A method carries an
outbound A2A request *or* the inbound A2A response to it (section 4.9) in the same shape; the two are told
apart by the payload, not by the AOS method.
"""

from __future__ import annotations

from typing import Annotated, Generic, Literal, TypeVar

from pydantic import Field

from ._base import JSONObject, Timestamp, WireModel
from ._objects import (
    A2AContext,
    AgentTrigger,
    KnowledgeRetrievalStepParams,
    Message,
    Source,
    StepContext,
    ToolCallRequest,
    ToolCallResult,
)

__all__ = [
    "A2A_METHODS",
    "METHODS",
    "REQUEST_MODELS",
    "A2AMessageSend",
    "A2AMessageStream",
    "A2AParams",
    "A2ATasksCancel",
    "A2ATasksGet",
    "A2ATasksPushNotificationConfigGet",
    "A2ATasksPushNotificationConfigSet",
    "A2ATasksResubscribe",
    "AOSParams",
    "AOSRequest",
    "AgentTriggerParams",
    "AgentTriggerStep",
    "JSONRPCRequest",
    "KnowledgeRetrievalParams",
    "KnowledgeRetrievalStep",
    "MCPMessage",
    "MCPParams",
    "MemoryContextRetrievalParams",
    "MemoryContextRetrievalStep",
    "MemoryStoreParams",
    "MemoryStoreStep",
    "MessageParams",
    "MessageStep",
    "PingParams",
    "PingRequest",
    "RequestId",
    "StepParams",
    "ToolCallRequestParams",
    "ToolCallRequestStep",
    "ToolCallResultParams",
    "ToolCallResultStep",
]

RequestId = str | int
"""A request id: a string or an integer (AOS §3.12.1 admits no ``null`` and no fractions)."""

ParamsT = TypeVar("ParamsT")


class JSONRPCRequest(WireModel, Generic[ParamsT]):
    """§3.12.1 -- a JSON-RPC 2.0 request. ``JSONRPCRequest[JsonValue]`` is the untyped envelope.

    ``id`` is ``None`` for a notification (a request without an ``id`` member), which gets no response.
    """

    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId | None = None
    method: str
    params: ParamsT


class AOSParams(WireModel):
    """Base of every method's ``params``."""


class StepParams(AOSParams):
    """Base of the ``steps/*`` params: every step carries its :class:`StepContext`."""

    context: StepContext


class AgentTriggerParams(StepParams):
    """§4.1 ``steps/agentTrigger`` -- the trigger that activated an autonomous agent."""

    trigger: AgentTrigger


class KnowledgeRetrievalParams(StepParams):
    """§4.2 ``steps/knowledgeRetrieval`` -- what was retrieved, before it grounds the agent's answer."""

    knowledge_step: KnowledgeRetrievalStepParams
    reasoning: str | None = None


class _MemoryParams(StepParams):
    memory: list[str]
    reasoning: str | None = None


class MemoryStoreParams(_MemoryParams):
    """§4.3 ``steps/memoryStore`` -- memory about to be stored (JSON memory as stringified JSON)."""


class MemoryContextRetrievalParams(_MemoryParams):
    """§4.4 ``steps/memoryContextRetrieval`` -- memory retrieved into the context of the current turn."""


class MessageParams(StepParams):
    """§4.5 ``steps/message`` -- a user prompt, agent response or system message, with its citations.

    The member is ``citation`` as in the text (the published schema says ``citations``).
    """

    message: Message
    citation: list[Source]
    reasoning: str | None = None


class ToolCallRequestParams(StepParams):
    """§4.6 ``steps/toolCallRequest`` -- a tool call about to be made."""

    tool_call_request: ToolCallRequest
    reasoning: str | None = None


class ToolCallResultParams(StepParams):
    """§4.6 ``steps/toolCallResult`` -- a tool's result before it reaches the model.

    ``executionId`` and ``result`` sit directly in ``params`` as in the text (the published schema nests
    them under ``params.toolCallResult``).
    """

    execution_id: str
    result: ToolCallResult


class PingParams(AOSParams):
    """§4.7 ``ping`` -- is the guardian alive? ``timeout`` (ms) defaults to 5000 upstream when absent."""

    timestamp: Timestamp
    timeout: int | None = None
    metadata: JSONObject | None = None


class A2AParams(AOSParams):
    """§4.8/4.9 -- an A2A message as sent or received (``payload``), who exchanges it, and why."""

    payload: JSONObject
    context: A2AContext | None = None
    reasoning: str | None = None


class MCPParams(AOSParams):
    """§4.10 ``protocols/MCP`` -- an MCP message as sent or received."""

    message: JSONObject
    reasoning: str | None = None


class AgentTriggerStep(JSONRPCRequest[AgentTriggerParams]):
    """A ``steps/agentTrigger`` request."""

    method: Literal["steps/agentTrigger"] = "steps/agentTrigger"


class KnowledgeRetrievalStep(JSONRPCRequest[KnowledgeRetrievalParams]):
    """A ``steps/knowledgeRetrieval`` request."""

    method: Literal["steps/knowledgeRetrieval"] = "steps/knowledgeRetrieval"


class MemoryStoreStep(JSONRPCRequest[MemoryStoreParams]):
    """A ``steps/memoryStore`` request."""

    method: Literal["steps/memoryStore"] = "steps/memoryStore"


class MemoryContextRetrievalStep(JSONRPCRequest[MemoryContextRetrievalParams]):
    """A ``steps/memoryContextRetrieval`` request."""

    method: Literal["steps/memoryContextRetrieval"] = "steps/memoryContextRetrieval"


class MessageStep(JSONRPCRequest[MessageParams]):
    """A ``steps/message`` request."""

    method: Literal["steps/message"] = "steps/message"


class ToolCallRequestStep(JSONRPCRequest[ToolCallRequestParams]):
    """A ``steps/toolCallRequest`` request."""

    method: Literal["steps/toolCallRequest"] = "steps/toolCallRequest"


class ToolCallResultStep(JSONRPCRequest[ToolCallResultParams]):
    """A ``steps/toolCallResult`` request."""

    method: Literal["steps/toolCallResult"] = "steps/toolCallResult"


class PingRequest(JSONRPCRequest[PingParams]):
    """A ``ping`` request; answered with a ``PingRequestResult``, not a decision."""

    method: Literal["ping"] = "ping"


class A2AMessageSend(JSONRPCRequest[A2AParams]):
    """A2A ``message/send``."""

    method: Literal["message/send"] = "message/send"


class A2AMessageStream(JSONRPCRequest[A2AParams]):
    """A2A ``message/stream``."""

    method: Literal["message/stream"] = "message/stream"


class A2ATasksPushNotificationConfigSet(JSONRPCRequest[A2AParams]):
    """A2A ``tasks/pushNotificationConfig/set``."""

    method: Literal["tasks/pushNotificationConfig/set"] = "tasks/pushNotificationConfig/set"


class A2ATasksPushNotificationConfigGet(JSONRPCRequest[A2AParams]):
    """A2A ``tasks/pushNotificationConfig/get``."""

    method: Literal["tasks/pushNotificationConfig/get"] = "tasks/pushNotificationConfig/get"


class A2ATasksResubscribe(JSONRPCRequest[A2AParams]):
    """A2A ``tasks/resubscribe``."""

    method: Literal["tasks/resubscribe"] = "tasks/resubscribe"


class A2ATasksCancel(JSONRPCRequest[A2AParams]):
    """A2A ``tasks/cancel``."""

    method: Literal["tasks/cancel"] = "tasks/cancel"


class A2ATasksGet(JSONRPCRequest[A2AParams]):
    """A2A ``tasks/get``."""

    method: Literal["tasks/get"] = "tasks/get"


class MCPMessage(JSONRPCRequest[MCPParams]):
    """A ``protocols/MCP`` request."""

    method: Literal["protocols/MCP"] = "protocols/MCP"


AOSRequest = Annotated[
    AgentTriggerStep
    | KnowledgeRetrievalStep
    | MemoryStoreStep
    | MemoryContextRetrievalStep
    | MessageStep
    | ToolCallRequestStep
    | ToolCallResultStep
    | PingRequest
    | A2AMessageSend
    | A2AMessageStream
    | A2ATasksPushNotificationConfigSet
    | A2ATasksPushNotificationConfigGet
    | A2ATasksResubscribe
    | A2ATasksCancel
    | A2ATasksGet
    | MCPMessage,
    Field(discriminator="method"),
]
"""Any AOS request, picked by ``method``."""

REQUEST_MODELS: dict[str, type[AOSRequest]] = {
    model.model_fields["method"].default: model
    for model in (
        AgentTriggerStep,
        KnowledgeRetrievalStep,
        MemoryStoreStep,
        MemoryContextRetrievalStep,
        MessageStep,
        ToolCallRequestStep,
        ToolCallResultStep,
        PingRequest,
        A2AMessageSend,
        A2AMessageStream,
        A2ATasksPushNotificationConfigSet,
        A2ATasksPushNotificationConfigGet,
        A2ATasksResubscribe,
        A2ATasksCancel,
        A2ATasksGet,
        MCPMessage,
    )
}
"""Method name -> typed request model."""


def _params_model(request: type[AOSRequest]) -> type[AOSParams]:
    annotation = request.model_fields["params"].annotation
    if not (isinstance(annotation, type) and issubclass(annotation, AOSParams)):
        raise TypeError(f"{request.__name__}.params is not an AOSParams model")
    return annotation


METHODS: dict[str, type[AOSParams]] = {name: _params_model(model) for name, model in REQUEST_MODELS.items()}
"""Method name -> ``params`` model, for every method of section 4 (the seven A2A methods share one)."""

A2A_METHODS: frozenset[str] = frozenset(name for name, params in METHODS.items() if params is A2AParams)
"""The A2A method names (§4.8.2); AOS uses the A2A method name itself."""

OTHER_METHOD = "other"
""":func:`known_method`'s word for a method AOS does not have."""


def known_method(method: str) -> str:
    """``method`` if it is an AOS method, else ``"other"``: what spans, metrics and logs may say of a step's
    kind or a request's method.

    A method is not always agentguard's choice: any client of the reference guardian writes the one it sends,
    ``steps.A2A(a2a_method=...)`` is a ``Literal`` only to the type checker, and a host relaying a peer's
    message passes the method the peer wrote. Recorded as it came, each new name was a new span name and a
    new series of every metric (unbounded cardinality), and whatever text it held left the process with
    content capture off.
    """
    return method if method in METHODS else OTHER_METHOD
