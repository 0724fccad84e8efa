"""AOS 0.1.0 (Agent Observability Standard) on the wire: data objects, JSON-RPC envelopes and methods.

Every object of the specification is a pydantic model: snake_case in Python, camelCase on the wire, and
``dump`` gives the wire JSON. Build the request for a tool call about to be made, and read it back::

    from agentguard import aos

    context = aos.StepContext(
        agent=aos.Agent(
            name="support-agent",
            id="support-agent",
            instructions="You help customers with their orders.",
            version="1.0.0",
            provider=aos.AgentProvider(name="Corp", url="https://corp.example"),
        ),
        session=aos.Session(id="engagement-42"),
        turn_id="turn-1",
        step_id="step-3",
        timestamp="2025-07-01T12:00:00Z",
    )
    request = aos.ToolCallRequestStep(
        id="req-1",
        params=aos.ToolCallRequestParams(
            context=context,
            tool_call_request=aos.ToolCallRequest(
                execution_id="call-7",
                tool_id="send-email",
                inputs=[aos.ToolArgumentValue(name="to", value="bob@corp.example")],
            ),
            reasoning="The customer asked for a confirmation e-mail.",
        ),
    )
    wire = aos.dump(request)                    # the JSON body to POST to a guardian
    assert wire["method"] == "steps/toolCallRequest"
    assert wire["params"]["toolCallRequest"]["toolId"] == "send-email"
    assert aos.parse_request(wire) == request   # and back: a typed ToolCallRequestStep

    answer = aos.parse_response({"jsonrpc": "2.0", "id": "req-1",
                                 "result": {"decision": "deny", "message": "external recipient"}})
    assert isinstance(answer, aos.AOSSuccessResponse) and answer.result.decision is aos.Decision.DENY

Validating a decoded request (:func:`parse_request`) tells the three refusals apart, each carrying its
JSON-RPC code and the request's id: :class:`InvalidRequestError` (-32600), :class:`MethodNotFoundError`
(-32601) and :class:`InvalidParamsError` (-32602, naming the failing fields by path: the first 100, and how
many more). Unknown members are kept and round-trip; values are validated strictly.

Where the specification's text contradicts itself, its published schema, or plain sense, this package
decides as follows (the text wins over the schema, ARCHITECTURE decision 9):

- ``steps/toolCallResult`` has ``params.executionId`` and ``params.result`` (schema: nested under
  ``params.toolCallResult``); ``steps/message`` names its sources ``citation`` (schema: ``citations``) and
  requires the member; ``ping`` has ``params.timestamp`` (schema: top level). :func:`normalize_request`
  rewrites the schema's shapes into these.
- The three A2A methods the schema spells ``task/...`` are ``tasks/...``. A2A params are
  ``{payload, context?, reasoning?}`` (the upstream A2A pages; the text's table shows them at top level,
  which :func:`normalize_request` also accepts); ``context`` is ``{from?, to?}`` of :class:`A2AParty`.
- ``User.organization`` is optional, although the text says required: a guard often knows a user only by
  id and must not invent an organization (the schema agrees).
- ``Agent`` has no ``url`` (the schema requires one the text does not have; it is kept when sent).
- ``AOSSuccessResult.reasonCode`` is a list of reason codes (the text describes it as "Timestamp").
- Error responses are JSON-RPC's ``{code, message, data}`` with ``id: null`` when the id is unreadable
  (§5.2 types ``error`` as a string and ``id`` as a string only; §3.12.2 and §3.13 say otherwise).
- ``DataPart.data`` is a JSON object (its declared type) although its description says "or an array".
- A request ``id`` is a string or an integer, never ``null``; a request without ``id`` is a notification.
- ``ToolOutputDefinition.name`` is required as the text says (the schema requires nothing).
- ``ToolDefinition.arguments``/``outputs`` are required and may be ``null``; they, a tool argument's
  ``value`` and ``mimeType``, and an error's ``data`` keep an explicit ``null`` on the wire.
"""

from ._base import JSONObject, JSONValue, Timestamp, WireModel, utc_timestamp
from ._compat import normalize_request
from ._json import AmbiguousJSON, strict_json, unique_keys, valid_utf8
from ._methods import (
    A2A_METHODS,
    METHODS,
    REQUEST_MODELS,
    A2AMessageSend,
    A2AMessageStream,
    A2AParams,
    A2ATasksCancel,
    A2ATasksGet,
    A2ATasksPushNotificationConfigGet,
    A2ATasksPushNotificationConfigSet,
    A2ATasksResubscribe,
    AgentTriggerParams,
    AgentTriggerStep,
    AOSParams,
    AOSRequest,
    JSONRPCRequest,
    KnowledgeRetrievalParams,
    KnowledgeRetrievalStep,
    MCPMessage,
    MCPParams,
    MemoryContextRetrievalParams,
    MemoryContextRetrievalStep,
    MemoryStoreParams,
    MemoryStoreStep,
    MessageParams,
    MessageStep,
    PingParams,
    PingRequest,
    RequestId,
    StepParams,
    ToolCallRequestParams,
    ToolCallRequestStep,
    ToolCallResultParams,
    ToolCallResultStep,
    known_method,
)
from ._objects import (
    A2AAgent,
    A2AContext,
    A2AParty,
    Agent,
    AgentProvider,
    AgentTrigger,
    AgentTriggerEvent,
    DataPart,
    FileContent,
    FilePart,
    FileSource,
    FileWithBytes,
    FileWithUri,
    JSONTypeName,
    KnowledgeRetrievalResult,
    KnowledgeRetrievalStepParams,
    LlmProvider,
    MCPServer,
    Message,
    Model,
    Organization,
    Part,
    Resource,
    Session,
    SiteSource,
    Source,
    StepContext,
    TextPart,
    ToolArgumentDefinition,
    ToolArgumentValue,
    ToolCallRequest,
    ToolCallResult,
    ToolDefinition,
    ToolOutputDefinition,
    User,
)
from ._parse import (
    AOSRequestError,
    AOSResponse,
    AOSResponseError,
    FieldError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    dump,
    parse_request,
    parse_response,
)
from ._responses import (
    AOSSuccessResponse,
    AOSSuccessResult,
    Decision,
    ErrorCode,
    JSONRPCError,
    JSONRPCErrorResponse,
    JSONRPCSuccessResponse,
    PingRequestResult,
    PingRequestSuccessResponse,
)

__all__ = [
    "A2A_METHODS",
    "METHODS",
    "REQUEST_MODELS",
    "A2AAgent",
    "A2AContext",
    "A2AMessageSend",
    "A2AMessageStream",
    "A2AParams",
    "A2AParty",
    "A2ATasksCancel",
    "A2ATasksGet",
    "A2ATasksPushNotificationConfigGet",
    "A2ATasksPushNotificationConfigSet",
    "A2ATasksResubscribe",
    "AOSParams",
    "AOSRequest",
    "AOSRequestError",
    "AOSResponse",
    "AOSResponseError",
    "AOSSuccessResponse",
    "AOSSuccessResult",
    "Agent",
    "AgentProvider",
    "AgentTrigger",
    "AgentTriggerEvent",
    "AgentTriggerParams",
    "AgentTriggerStep",
    "AmbiguousJSON",
    "DataPart",
    "Decision",
    "ErrorCode",
    "FieldError",
    "FileContent",
    "FilePart",
    "FileSource",
    "FileWithBytes",
    "FileWithUri",
    "InvalidParamsError",
    "InvalidRequestError",
    "JSONObject",
    "JSONRPCError",
    "JSONRPCErrorResponse",
    "JSONRPCRequest",
    "JSONRPCSuccessResponse",
    "JSONTypeName",
    "JSONValue",
    "KnowledgeRetrievalParams",
    "KnowledgeRetrievalResult",
    "KnowledgeRetrievalStep",
    "KnowledgeRetrievalStepParams",
    "LlmProvider",
    "MCPMessage",
    "MCPParams",
    "MCPServer",
    "MemoryContextRetrievalParams",
    "MemoryContextRetrievalStep",
    "MemoryStoreParams",
    "MemoryStoreStep",
    "Message",
    "MessageParams",
    "MessageStep",
    "MethodNotFoundError",
    "Model",
    "Organization",
    "Part",
    "PingParams",
    "PingRequest",
    "PingRequestResult",
    "PingRequestSuccessResponse",
    "RequestId",
    "Resource",
    "Session",
    "SiteSource",
    "Source",
    "StepContext",
    "StepParams",
    "TextPart",
    "Timestamp",
    "ToolArgumentDefinition",
    "ToolArgumentValue",
    "ToolCallRequest",
    "ToolCallRequestParams",
    "ToolCallRequestStep",
    "ToolCallResult",
    "ToolCallResultParams",
    "ToolCallResultStep",
    "ToolDefinition",
    "ToolOutputDefinition",
    "User",
    "WireModel",
    "dump",
    "known_method",
    "normalize_request",
    "parse_request",
    "parse_response",
    "strict_json",
    "unique_keys",
    "utc_timestamp",
    "valid_utf8",
]
