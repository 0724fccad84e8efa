"""The standard data objects of AOS 0.1.0, section 3, plus the A2A context the upstream A2A pages add.

Field names, types and required-ness follow the text of the specification. Where it contradicts itself or
the published schema, the choice made is listed in the :mod:`agentguard.aos` docstring.

Unions are tagged so that a validation error names the one member that was meant (``Part`` and ``Source``
by ``kind``, a file by whether it carries ``bytes`` or a ``uri``) instead of listing why every member failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, JsonValue, Tag, model_validator

from ._base import JSONObject, NullableMembers, Timestamp, WireModel

__all__ = [
    "A2AAgent",
    "A2AContext",
    "A2AParty",
    "Agent",
    "AgentProvider",
    "AgentTrigger",
    "AgentTriggerEvent",
    "DataPart",
    "FileContent",
    "FilePart",
    "FileSource",
    "FileWithBytes",
    "FileWithUri",
    "JSONTypeName",
    "KnowledgeRetrievalResult",
    "KnowledgeRetrievalStepParams",
    "LlmProvider",
    "MCPServer",
    "Message",
    "Model",
    "Organization",
    "Part",
    "Resource",
    "Session",
    "SiteSource",
    "Source",
    "StepContext",
    "TextPart",
    "ToolArgumentDefinition",
    "ToolArgumentValue",
    "ToolCallRequest",
    "ToolCallResult",
    "ToolDefinition",
    "ToolOutputDefinition",
    "User",
]

JSONTypeName = Literal["string", "number", "boolean", "object", "array", "null"]
"""The JSON type names a tool argument or output may declare."""


# ------------------------------------------------------------------------------------------ 3.11, 3.9, 3.10


class Organization(WireModel):
    """§3.11 -- the organization an agent or a user belongs to."""

    id: str
    name: str | None = None
    metadata: JSONObject | None = None


class Session(WireModel):
    """§3.9 -- the scoped interaction (in agentguard: the engagement) a step belongs to."""

    id: str
    metadata: JSONObject | None = None


class User(WireModel):
    """§3.10 -- the user the agent acts for.

    ``organization`` is optional here although the text marks it required: a guard often knows a user only
    by id, the published schema makes it optional, and an agent must not invent an organization to send one.
    """

    id: str
    name: str | None = None
    email: str | None = None
    organization: Organization | None = None
    metadata: JSONObject | None = None


# ------------------------------------------------------------------------------------------------- 3.1, 3.2


class AgentProvider(WireModel):
    """§3.1.1 -- who provides the agent."""

    name: str
    url: str
    metadata: JSONObject | None = None


class LlmProvider(WireModel):
    """§3.1.3 -- who provides the model."""

    name: str
    metadata: JSONObject | None = None


class Model(WireModel):
    """§3.1.2 -- the LLM behind the agent."""

    name: str
    id: str
    provider: LlmProvider
    max_tokens: int | None = None
    context_window: int | None = None
    stop_sequences: list[str] | None = None
    default_params: JSONObject | None = None
    metadata: JSONObject | None = None


class MCPServer(WireModel):
    """§3.1.4 -- an MCP server available to the agent."""

    name: str
    version: str


class Resource(WireModel):
    """§3.1.5 -- a resource available to the agent; knowledge results and file sources refer to its ``id``."""

    name: str
    id: str
    description: str | None = None
    content: str
    mime_type: str | None = None
    metadata: JSONObject | None = None


class ToolArgumentDefinition(NullableMembers):
    """§3.2.1 -- one argument in a tool's schema. ``mimeType`` may be an explicit ``null``."""

    nullable = frozenset({"mime_type"})

    name: str
    id: str | None = None
    description: str | None = None
    type: JSONTypeName | None = None
    mime_type: str | None = None
    required: bool


class ToolOutputDefinition(NullableMembers):
    """§3.2.2 -- one output in a tool's schema. ``mimeType`` may be an explicit ``null``."""

    nullable = frozenset({"mime_type"})

    name: str
    id: str | None = None
    description: str | None = None
    type: JSONTypeName | None = None
    mime_type: str | None = None


class ToolDefinition(NullableMembers):
    """§3.2 -- a tool the agent can call.

    ``arguments`` and ``outputs`` are required but may be ``null`` (no arguments / no outputs), so they are
    always written, as ``null`` when unset.
    """

    nullable = frozenset({"arguments", "outputs"})

    name: str
    id: str
    description: str | None = None
    type: str
    arguments: list[ToolArgumentDefinition] | None
    outputs: list[ToolOutputDefinition] | None
    metadata: JSONObject | None = None


class Agent(WireModel):
    """§3.1 -- the agent a step belongs to: identity, instructions, model, tools and resources."""

    name: str
    id: str
    description: str | None = None
    instructions: str
    version: str
    provider: AgentProvider
    model: Model | None = None
    tools: list[ToolDefinition] | None = None
    mcp_servers: list[MCPServer] | None = None
    resources: list[Resource] | None = None
    organization: Organization | None = None
    metadata: JSONObject | None = None


# ---------------------------------------------------------------------------------------------- 3.3 to 3.5


class FileWithBytes(WireModel):
    """§3.5.1 -- file content carried inline, base64-encoded. Carries no ``uri``."""

    name: str | None = None
    mime_type: str | None = None
    bytes: str

    @model_validator(mode="before")
    @classmethod
    def _not_also_uri(cls, data: Any) -> Any:
        if isinstance(data, dict) and "uri" in data:
            raise ValueError("a file has either 'bytes' or 'uri', not both")
        return data


class FileWithUri(WireModel):
    """§3.5.2 -- file content referred to by URI."""

    name: str | None = None
    mime_type: str | None = None
    uri: str


def _file_tag(value: Any) -> str:
    if isinstance(value, dict):
        return "FileWithBytes" if "bytes" in value else "FileWithUri"
    return type(value).__name__


FileContent = Annotated[
    Annotated[FileWithBytes, Tag("FileWithBytes")] | Annotated[FileWithUri, Tag("FileWithUri")],
    Discriminator(_file_tag),
]
"""``FileWithBytes | FileWithUri``: a file is read as inline bytes when it has ``bytes``, else by ``uri``."""


class TextPart(WireModel):
    """§3.4.1 -- plain text."""

    kind: Literal["text"] = "text"
    text: str
    metadata: JSONObject | None = None


class FilePart(WireModel):
    """§3.4.2 -- a file, inline or by URI."""

    kind: Literal["file"] = "file"
    file: FileContent
    metadata: JSONObject | None = None


class DataPart(WireModel):
    """§3.4.3 -- structured data.

    ``data`` is a JSON object: the field's type (``Record<string, any>``), the schema and A2A all say so;
    the text's aside "(an object or an array)" is not followed -- wrap an array in an object.
    """

    kind: Literal["data"] = "data"
    data: JSONObject
    metadata: JSONObject | None = None


_PART_TAGS = {"text": "TextPart", "file": "FilePart", "data": "DataPart"}
_SOURCE_TAGS = {"file": "FileSource", "site": "SiteSource"}


def _kind_tag(tags: dict[str, str]) -> Callable[[Any], str | None]:
    """A discriminator that maps a wire ``kind`` (or a model instance) to the union member's tag."""

    def tag(value: Any) -> str | None:
        if isinstance(value, dict):
            kind = value.get("kind")
            return tags.get(kind) if isinstance(kind, str) else None
        return type(value).__name__

    return tag


Part = Annotated[
    Annotated[TextPart, Tag("TextPart")]
    | Annotated[FilePart, Tag("FilePart")]
    | Annotated[DataPart, Tag("DataPart")],
    Discriminator(
        _kind_tag(_PART_TAGS),
        custom_error_type="invalid_part_kind",
        custom_error_message="'kind' must be one of 'text', 'file', 'data'",
    ),
]
"""§3.4 -- ``TextPart | FilePart | DataPart``, chosen by ``kind``."""


class Message(WireModel):
    """§3.3 -- a user prompt, an agent response or a system message. ``content`` holds at least one part."""

    id: str
    role: Literal["user", "agent", "system"]
    content: Annotated[list[Part], Field(min_length=1)]
    metadata: JSONObject | None = None


# ---------------------------------------------------------------------------------------------------- 3.6


class AgentTriggerEvent(WireModel):
    """§3.6.1 -- the event that triggered the agent (an e-mail, a schedule tick, ...)."""

    type: str
    id: str


class AgentTrigger(WireModel):
    """§3.6 -- what activated an autonomous agent. A user prompt is a ``Message`` instead."""

    type: Literal["autonomous"]
    event: AgentTriggerEvent
    content: Annotated[list[Part], Field(min_length=1)]
    metadata: JSONObject | None = None


# ---------------------------------------------------------------------------------------------------- 3.7


class FileSource(WireModel):
    """§3.7.1 -- a cited file; ``id`` matches a ``Resource`` id when the agent has it."""

    kind: Literal["file"] = "file"
    id: str
    name: str
    url: str | None = None


class SiteSource(WireModel):
    """§3.7.2 -- a cited web site."""

    kind: Literal["site"] = "site"
    url: str


Source = Annotated[
    Annotated[FileSource, Tag("FileSource")] | Annotated[SiteSource, Tag("SiteSource")],
    Discriminator(
        _kind_tag(_SOURCE_TAGS),
        custom_error_type="invalid_source_kind",
        custom_error_message="'kind' must be one of 'file', 'site'",
    ),
]
"""§3.7 -- ``FileSource | SiteSource``, chosen by ``kind``."""


# ---------------------------------------------------------------------------------------------------- 3.8


class StepContext(WireModel):
    """§3.8 -- who is acting, in which session, turn and step, when, and for which user."""

    agent: Agent
    session: Session
    turn_id: str
    step_id: str
    timestamp: Timestamp
    user: User | None = None


# ---------------------------------------------------------------------------------------------------- 3.14


class KnowledgeRetrievalResult(WireModel):
    """§3.14.1 -- one retrieved chunk; ``id`` matches a ``Resource`` id when the agent has it."""

    id: str
    content: str
    mime_type: str | None = None
    metadata: JSONObject | None = None


class KnowledgeRetrievalStepParams(WireModel):
    """§3.14 -- the query, keywords and results of a knowledge retrieval (``params.knowledgeStep``)."""

    query: str | None = None
    keywords: list[str] | None = None
    results: list[KnowledgeRetrievalResult]


# ---------------------------------------------------------------------------------------------- 3.15, 4.6


class ToolArgumentValue(NullableMembers):
    """§3.15.1 -- one input of a tool call. ``value`` is any JSON value, ``null`` included."""

    nullable = frozenset({"value"})

    name: str
    id: str | None = None
    value: JsonValue


class ToolCallRequest(WireModel):
    """§3.15 -- the tool the agent is about to call and its inputs."""

    execution_id: str
    tool_id: str
    inputs: list[ToolArgumentValue]


class ToolCallResult(WireModel):
    """§4.6.1.1 -- what a tool returned: text outputs (possibly none) and whether it failed."""

    outputs: list[TextPart]
    is_error: bool


# --------------------------------------------------------------------------------------------- A2A context


class A2AAgent(WireModel):
    """An agent on either side of an A2A exchange.

    The upstream A2A pages describe the caller with a full :class:`Agent` and the remote side with only
    ``url``, ``name`` and ``version``; every member is optional so that both validate, and the members of a
    full ``Agent`` are kept as they are.
    """

    name: str | None = None
    url: str | None = None
    version: str | None = None


class A2AParty(WireModel):
    """One side of an A2A exchange: the agent and whether it is the A2A ``client`` or ``server``."""

    agent: A2AAgent
    role: Literal["client", "server"]


class A2AContext(WireModel):
    """The ``context`` of an A2A method: who sends (``from``) and who receives (``to``)."""

    from_: A2AParty | None = Field(default=None, alias="from")
    to: A2AParty | None = None
