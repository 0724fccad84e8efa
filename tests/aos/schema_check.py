"""The published AOS JSON Schema, with its known defects patched, as a check for any AOS wire document.

The schema is kept in the repository as published (``tests/conformance/aos/``, source and license in
``tests/conformance/README.md``) and its known defects (listed there) are patched in a local copy, each
patch saying which defect and why. The patches make the schema *agree with the specification text*; they
never loosen it beyond that (``test_aos_schema.py`` checks that the patched schema still refuses what the text refuses).

Other test folders use :func:`schema_errors` to check the requests agentguard sends::

    from tests.aos.schema_check import schema_errors

    assert schema_errors(request) == []
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

from agentguard import aos

__all__ = [
    "REQUEST_DEFINITIONS",
    "SCHEMA_FILE",
    "errors_against",
    "patched_schema",
    "published_schema",
    "schema_errors",
]

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "conformance" / "aos" / "aos_schema.json"

# Method -> the schema's definition of its request (the schema still uses the earlier prefix ASOP).
REQUEST_DEFINITIONS = {
    "steps/agentTrigger": "AgentTriggerStep",
    "steps/knowledgeRetrieval": "KnowledgeRetrievalStep",
    "steps/memoryStore": "MemoryStoreStep",
    "steps/memoryContextRetrieval": "MemoryContextRetrievalStep",
    "steps/message": "MessageStep",
    "steps/toolCallRequest": "ToolCallRequestStep",
    "steps/toolCallResult": "ToolCallResultStep",
    "ping": "PingRequest",
    "message/send": "A2AMessageSend",
    "message/stream": "A2AMessageStream",
    "tasks/pushNotificationConfig/set": "A2ATaskPushNotificationConfigSet",
    "tasks/pushNotificationConfig/get": "A2ATaskPushNotificationConfigGet",
    "tasks/resubscribe": "A2ATasksResubscribe",
    "tasks/cancel": "A2ATasksCancel",
    "tasks/get": "A2ATaskGet",
    "protocols/MCP": "MCPMessage",
}
A2A_DEFINITIONS = [REQUEST_DEFINITIONS[method] for method in sorted(aos.A2A_METHODS)]


def _patched(schema: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(schema)
    defs = schema["$defs"]

    # Defect: Agent requires `url`, which the specification's Agent table (§3.1) does not have.
    defs["Agent"]["required"].remove("url")

    # Defect: three A2A methods are spelled `task/...`; §4.8.2 says `tasks/...`.
    for name in ("A2ATaskPushNotificationConfigSet", "A2ATaskPushNotificationConfigGet", "A2ATaskGet"):
        method = defs[name]["properties"]["method"]
        method["const"] = method["default"] = method["const"].replace("task/", "tasks/", 1)

    # Defect: MCPMessage and the A2A definitions put `required`/`type`/`title` inside `properties`, where
    # they declare properties named "required" etc. and constrain nothing, so the definitions accept any
    # document at all. Move them back to where they belong so these definitions check something.
    for name in [*A2A_DEFINITIONS, "MCPMessage"]:
        definition = defs[name]
        misplaced = definition["properties"]
        if name != "MCPMessage":  # the A2A definitions nest the whole definition under `properties`
            definition.clear()
            definition.update(
                {
                    "properties": {
                        k: v for k, v in misplaced.items() if k not in ("required", "title", "type")
                    },
                    "required": misplaced["required"],
                    "title": misplaced["title"],
                    "type": misplaced["type"],
                }
            )
        params = definition["properties"]["params"]
        params["required"] = params["properties"].pop("required")
    # ... and the A2A `params.required` lists `context`, which the upstream A2A pages treat as optional
    # (FIELD-NOTES: `params: {payload, context?, reasoning?}`): require only the payload.
    for name in A2A_DEFINITIONS:
        defs[name]["properties"]["params"]["required"] = ["payload"]

    # Defect: A2AContext.from/to use `oneOf` over a full and a partial agent context; a full Agent matches
    # both and is therefore rejected. Either is fine: `anyOf`.
    for side in ("from", "to"):
        context = defs["A2AContext"]["properties"][side]
        context["anyOf"] = context.pop("oneOf")
    # ... and A2APartialAgentDetails nests its fields under a property called `agent` (the same slip):
    # lift them so that the partial agent is described at all.
    partial = defs["A2APartialAgentDetails"]
    partial["properties"] = partial["properties"].pop("agent")

    # Defect: PingRequest requires `timestamp` at the top level; §4.7.1 puts it in `params` (required).
    ping = defs["PingRequest"]
    ping["required"] = ["method", "id", "params"]
    ping["properties"]["params"]["required"] = ["timestamp"]

    # Defect: JSONRPCErrorResponse.id does not admit null, which JSON-RPC 2.0 (and §3.12.2) require for an
    # error about a request whose id could not be read (a parse error).
    defs["JSONRPCErrorResponse"]["properties"]["id"]["type"] = ["string", "integer", "null"]

    # Defect (decision 9): steps/toolCallResult nests executionId/result under params.toolCallResult; the
    # text (§4.6.1) puts them directly in params.
    result_params = defs["ToolCallResultStep"]["properties"]["params"]
    nested = result_params["properties"].pop("toolCallResult")
    result_params["properties"].update(nested["properties"])
    result_params["required"] = ["context", "executionId", "result"]

    # Defect (decision 9): steps/message names its sources `citations` (optional); the text (§4.5.1)
    # names them `citation` (required).
    message_params = defs["MessageStep"]["properties"]["params"]
    message_params["properties"]["citation"] = message_params["properties"].pop("citations")
    message_params["required"] = ["context", "message", "citation"]
    return schema


@functools.cache
def published_schema() -> dict[str, Any]:
    """The schema as published (a fresh copy is not made: do not modify it)."""
    if not SCHEMA_FILE.is_file():
        raise FileNotFoundError(f"the published AOS schema is not at {SCHEMA_FILE}")
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return schema


@functools.cache
def patched_schema() -> dict[str, Any]:
    """The schema with the defects above patched (checked to be a valid Draft-07 schema)."""
    schema = _patched(published_schema())
    Draft7Validator.check_schema(schema)
    return schema


def errors_against(schema: dict[str, Any], definition: str, document: Any) -> list[str]:
    """Every way ``document`` fails ``schema``'s ``definition``, as ``[path]: message`` lines."""
    validator = Draft7Validator({"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]})
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def schema_errors(document: Any, definition: str | None = None) -> list[str]:
    """How ``document`` fails the patched schema; ``[]`` when it is valid.

    ``definition`` defaults to the request definition of the document's ``method``, or to ``ASOPResponse``
    for a response (a document with ``result`` or ``error``).
    """
    if definition is None:
        if isinstance(document, dict) and ("result" in document or "error" in document):
            definition = "ASOPResponse"
        else:
            method = document.get("method") if isinstance(document, dict) else None
            definition = (
                REQUEST_DEFINITIONS.get(method, "ASOPRequest") if isinstance(method, str) else "ASOPRequest"
            )
    return errors_against(patched_schema(), definition, document)
