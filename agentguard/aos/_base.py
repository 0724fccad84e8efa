"""The base every AOS wire model shares, and the JSON types they are written in.

Why one base: every AOS object has the same wire conventions -- camelCase member names, snake_case Python
attributes, JSON-only values -- and the same openness. The published AOS schema closes no object, and peers
already send members the text lacks (``Agent.url``, ``Model.type``), so unknown members are *kept*: they
validate, survive a round trip and reach the guardian, but agentguard never interprets them. A guardian's
``modifiedRequest`` is a complete replacement request, so dropping a member there would silently delete
data the agent sent.

Values are validated strictly (``"5"`` is not an integer, ``"true"`` is not a boolean): a guardian decides
on these values, and coercing them would make it decide on something the agent did not send. ``NaN`` and
the infinities are refused anywhere: JSON has no such numbers, so a model holding one could not be sent.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    JsonValue,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.alias_generators import to_camel

__all__ = ["JSONObject", "JSONValue", "Timestamp", "WireModel", "utc_timestamp"]

JSONValue = JsonValue
"""Any JSON value: ``None``, ``bool``, ``int``, ``float``, ``str``, or a list or str-keyed dict of them."""

JSONObject = dict[str, JsonValue]
"""A JSON object (the spec's ``Record<string, any>``)."""


def _check_timestamp(value: str) -> str:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 timestamp") from None
    return value


Timestamp = Annotated[str, AfterValidator(_check_timestamp)]
"""An ISO 8601 timestamp, kept as the string the peer sent so that it round-trips byte for byte."""


def utc_timestamp() -> str:
    """The current UTC time as an ISO 8601 string with a ``Z`` suffix (the form the spec recommends)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class WireModel(BaseModel):
    """Base of every AOS object: camelCase on the wire, snake_case in Python, unknown members kept."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        strict=True,
        allow_inf_nan=False,
        defer_build=True,
    )


class NullableMembers(WireModel):
    """Base of objects with members the spec allows to be an explicit JSON ``null``.

    ``dump`` leaves out unset optional members (``exclude_none``), which would also drop a ``null`` the spec
    gives meaning to: ``ToolDefinition.arguments: null`` ("the tool has no arguments"), a tool argument whose
    value is ``null``, the ``id: null`` of an error response to an unparseable request. The members named in
    :attr:`nullable` are written as ``null`` whenever they were given, so such objects round-trip exactly.
    """

    nullable: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _keep_given_nulls(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if info.exclude_none:
            fields = type(self).model_fields
            for name in self.nullable & self.model_fields_set:
                if getattr(self, name) is None:
                    alias = fields[name].alias
                    data[alias if info.by_alias and alias else name] = None
        return data
