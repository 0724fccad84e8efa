"""Turn decoded JSON into typed AOS requests and responses, and typed models back into wire JSON.

The errors::

    ValueError
    ├── AOSRequestError          a request a guardian must refuse; ``code`` is its JSON-RPC error code
    │   ├── InvalidRequestError  -32600: not a JSON-RPC 2.0 request object
    │   ├── MethodNotFoundError  -32601: a well-formed request for a method AOS does not have
    │   └── InvalidParamsError   -32602: ``params`` do not fit the method (every failing field, by path)
    └── AOSResponseError         a reply that is not a well-formed AOS response

They derive from ``ValueError`` only, because this layer imports nothing of agentguard's: a caller (the
guardian client, the reference guardian) translates them into its own outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue, ValidationError

from ._base import WireModel
from ._methods import REQUEST_MODELS, AOSRequest, RequestId
from ._responses import (
    AOSSuccessResponse,
    ErrorCode,
    JSONRPCError,
    JSONRPCErrorResponse,
    PingRequestSuccessResponse,
)

__all__ = [
    "AOSRequestError",
    "AOSResponse",
    "AOSResponseError",
    "FieldError",
    "InvalidParamsError",
    "InvalidRequestError",
    "MethodNotFoundError",
    "dump",
    "parse_request",
    "parse_response",
]

AOSResponse = AOSSuccessResponse | PingRequestSuccessResponse | JSONRPCErrorResponse
"""Any answer a guardian gives."""

# Tags of the tagged unions in ``_objects``: pydantic puts them in an error's location, where they name no
# member of the wire document, so field paths leave them out.
_UNION_TAGS = frozenset(
    {"TextPart", "FilePart", "DataPart", "FileWithBytes", "FileWithUri", "FileSource", "SiteSource"}
)


@dataclass(frozen=True)
class FieldError:
    """One reason a document failed validation: where (``params.toolCallRequest.inputs[0].name``) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in _UNION_TAGS:
            path += f".{part}" if path else part
    return path or "<document>"


MAX_FIELD_ERRORS = 100
"""The most failing fields a parse error lists (:attr:`InvalidParamsError.omitted` counts the others). A
400 KB ``params`` can fail in 200,000 fields: listing each cost a guardian more than a second of CPU per
request, and made an answer forty times the request's size."""


def _field_errors(error: ValidationError) -> tuple[tuple[FieldError, ...], int]:
    """The first :data:`MAX_FIELD_ERRORS` failing fields of ``error``, and how many more there are."""
    details = error.errors(include_url=False, include_context=False, include_input=False)
    listed = tuple(
        FieldError(_path(detail["loc"]), detail["msg"].removeprefix("Value error, "))
        for detail in details[:MAX_FIELD_ERRORS]
    )
    return listed, len(details) - len(listed)


class AOSRequestError(ValueError):
    """A request a guardian must answer with a JSON-RPC error.

    ``request_id`` is the request's id when it could be read, else ``None`` (the error response's ``id``).
    """

    code: ErrorCode

    def __init__(self, message: str, *, request_id: RequestId | None = None, data: JsonValue = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.data = data

    def to_response(self) -> JSONRPCErrorResponse:
        """The JSON-RPC error response a guardian sends for this request."""
        error = JSONRPCError(code=self.code, message=self.message)
        if self.data is not None:
            error.data = self.data
        return JSONRPCErrorResponse(id=self.request_id, error=error)


class InvalidRequestError(AOSRequestError):
    """-32600: valid JSON, but not a JSON-RPC 2.0 request object."""

    code = ErrorCode.INVALID_REQUEST


class MethodNotFoundError(AOSRequestError):
    """-32601: the method is not one of AOS's. ``method`` is the name asked for."""

    code = ErrorCode.METHOD_NOT_FOUND

    def __init__(self, method: str, *, request_id: RequestId | None = None) -> None:
        super().__init__(f"Method not found: {method}", request_id=request_id, data={"method": method})
        self.method = method


class InvalidParamsError(AOSRequestError):
    """-32602: ``params`` do not fit the method. :attr:`errors` lists the failing fields by path, at most
    :data:`MAX_FIELD_ERRORS` of them; :attr:`omitted` counts the others.

    The message names the first one; ``data.errors`` carries those listed as ``{path, message}``, and
    ``data.omitted`` the count of the others when there are any.
    """

    code = ErrorCode.INVALID_PARAMS

    def __init__(
        self, errors: Sequence[FieldError], *, request_id: RequestId | None = None, omitted: int = 0
    ) -> None:
        self.errors = tuple(errors)
        self.omitted = omitted
        data: dict[str, JsonValue] = {"errors": [{"path": e.path, "message": e.message} for e in self.errors]}
        if omitted:
            data["omitted"] = omitted
        super().__init__(f"Invalid params: {self.errors[0]}", request_id=request_id, data=data)


class AOSResponseError(ValueError):
    """A guardian's reply is not a well-formed AOS response. :attr:`errors` lists what is wrong, by path."""

    def __init__(self, errors: Sequence[FieldError], *, omitted: int = 0) -> None:
        self.errors = tuple(errors)
        self.omitted = omitted
        more = f" (and {omitted} more)" if omitted else ""
        super().__init__("malformed AOS response: " + "; ".join(map(str, self.errors)) + more)


def _request_id(obj: dict[str, Any]) -> RequestId | None:
    if "id" not in obj:
        return None
    value = obj["id"]
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise InvalidRequestError("Invalid Request: 'id' must be a string or an integer")


def parse_request(obj: Any) -> AOSRequest:
    """Validate a decoded JSON-RPC request and return the typed request for its method.

    Raises :class:`InvalidRequestError` for anything that is not a JSON-RPC 2.0 request object,
    :class:`MethodNotFoundError` for a method AOS does not define and :class:`InvalidParamsError` naming
    every failing field. The request is read in the specification text's shape; pass it through
    :func:`~agentguard.aos.normalize_request` first to accept the published schema's shapes as well.
    """
    if not isinstance(obj, dict):
        raise InvalidRequestError("Invalid Request: a request must be a JSON object")
    request_id = _request_id(obj)
    if obj.get("jsonrpc") != "2.0":
        raise InvalidRequestError("Invalid Request: 'jsonrpc' must be exactly \"2.0\"", request_id=request_id)
    method = obj.get("method")
    if not isinstance(method, str):
        raise InvalidRequestError("Invalid Request: 'method' must be a string", request_id=request_id)
    params = obj.get("params")
    if "params" in obj and not isinstance(params, dict | list):
        raise InvalidRequestError(
            "Invalid Request: 'params' must be an object or an array", request_id=request_id
        )
    model = REQUEST_MODELS.get(method)
    if model is None:
        raise MethodNotFoundError(method, request_id=request_id)
    if isinstance(params, list):
        raise InvalidParamsError(
            [FieldError("params", "AOS methods take named params (an object), not an array")],
            request_id=request_id,
        )
    try:
        return model.model_validate(obj)
    except ValidationError as error:
        listed, omitted = _field_errors(error)
        raise InvalidParamsError(listed, request_id=request_id, omitted=omitted) from None


def parse_response(obj: Any) -> AOSResponse:
    """Validate a decoded guardian reply: a decision, a ping result or a JSON-RPC error.

    Raises :class:`AOSResponseError` when it is none of these.
    """
    if not isinstance(obj, dict):
        raise AOSResponseError([FieldError("<document>", "a response must be a JSON object")])
    if obj.get("jsonrpc") != "2.0":
        raise AOSResponseError([FieldError("jsonrpc", 'must be exactly "2.0"')])
    if ("result" in obj) == ("error" in obj):
        raise AOSResponseError(
            [FieldError("<document>", "a response has exactly one of 'result' and 'error'")]
        )
    model: type[AOSResponse]
    if "error" in obj:
        model = JSONRPCErrorResponse
    else:
        result = obj["result"]
        is_ping = isinstance(result, dict) and "status" in result and "decision" not in result
        model = PingRequestSuccessResponse if is_ping else AOSSuccessResponse
    try:
        return model.model_validate(obj)
    except ValidationError as error:
        listed, omitted = _field_errors(error)
        raise AOSResponseError(listed, omitted=omitted) from None


def dump(model: WireModel) -> dict[str, JsonValue]:
    """The wire JSON of any AOS model: camelCase members, unset optional members left out."""
    data: dict[str, JsonValue] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data
