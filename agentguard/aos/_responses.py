"""What a guardian answers (sections 3.12.2, 3.13 and 5): a decision, a ping result, or a JSON-RPC error.

The error response follows JSON-RPC 2.0 (``error: {code, message, data}``, ``id: null`` when the request's
id could not be read), not §5.2's table, which types ``error`` as a string and ``id`` as a string only; the
text's own §3.12.2 and §3.13 say the former.
"""

from __future__ import annotations

import enum
from typing import Any, Generic, Literal, TypeVar

from pydantic import Field, JsonValue, field_validator

from ._base import JSONObject, NullableMembers, Timestamp, WireModel
from ._compat import normalize_request
from ._methods import AOSRequest, RequestId

__all__ = [
    "AOSSuccessResponse",
    "AOSSuccessResult",
    "Decision",
    "ErrorCode",
    "JSONRPCError",
    "JSONRPCErrorResponse",
    "JSONRPCSuccessResponse",
    "PingRequestResult",
    "PingRequestSuccessResponse",
]

ResultT = TypeVar("ResultT")


class ErrorCode(enum.IntEnum):
    """The JSON-RPC 2.0 error codes AOS uses (§6.1); ``-32000`` to ``-32099`` are left to servers."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603


class Decision(enum.StrEnum):
    """A guardian's decision on a step."""

    ALLOW = "allow"
    DENY = "deny"
    MODIFY = "modify"


class JSONRPCError(NullableMembers):
    """§3.13 -- the ``error`` member of an error response. ``data`` may be an explicit ``null``."""

    nullable = frozenset({"data"})

    code: int
    message: str
    data: JsonValue = None


class JSONRPCErrorResponse(NullableMembers):
    """§3.12.2 -- a failed call. ``id`` is ``null`` when the request's id could not be read."""

    nullable = frozenset({"id"})

    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId | None
    error: JSONRPCError


class JSONRPCSuccessResponse(WireModel, Generic[ResultT]):
    """§3.12.2 -- a successful call; ``result`` depends on the method."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: RequestId
    result: ResultT


class AOSSuccessResult(WireModel):
    """§5.1.1 -- the guardian's decision on a step.

    ``reasonCode`` is a list of machine-readable reason codes (the text's description of it, "Timestamp",
    is a copy-paste slip). ``modifiedRequest`` is the *complete* replacement request -- same ``id``, full
    ``params`` with ``context`` -- that the agent carries out instead when the decision is ``modify``. It is
    accepted in the published schema's shapes too and read in the text's shape
    (:func:`~agentguard.aos.normalize_request`).
    """

    decision: Decision = Field(strict=False)
    message: str
    reasoning: str | None = None
    reason_code: list[str] | None = None
    data: JSONObject | None = None
    modified_request: AOSRequest | None = None

    @field_validator("modified_request", mode="before")
    @classmethod
    def _text_shape(cls, value: Any) -> Any:
        return normalize_request(value)


class AOSSuccessResponse(JSONRPCSuccessResponse[AOSSuccessResult]):
    """§5.1 -- the answer to every method except ``ping``."""


class PingRequestResult(WireModel):
    """§5.3.1 -- the guardian's status and version."""

    status: Literal["connected", "error"]
    version: str
    timestamp: Timestamp
    metadata: JSONObject | None = None


class PingRequestSuccessResponse(JSONRPCSuccessResponse[PingRequestResult]):
    """§5.3 -- the answer to ``ping``."""
