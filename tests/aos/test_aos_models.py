"""Every AOS model and method round-trips exactly: wire JSON -> model -> the same wire JSON."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from pydantic import ValidationError

from agentguard import aos

# Where in the samples each data object occurs: (method of the sample request, path inside it).
OBJECT_SITES: dict[type[aos.WireModel], tuple[str, tuple[str | int, ...]]] = {
    aos.StepContext: ("steps/toolCallRequest", ("params", "context")),
    aos.Agent: ("steps/toolCallRequest", ("params", "context", "agent")),
    aos.AgentProvider: ("steps/toolCallRequest", ("params", "context", "agent", "provider")),
    aos.Model: ("steps/toolCallRequest", ("params", "context", "agent", "model")),
    aos.LlmProvider: ("steps/toolCallRequest", ("params", "context", "agent", "model", "provider")),
    aos.ToolDefinition: ("steps/toolCallRequest", ("params", "context", "agent", "tools", 0)),
    aos.ToolArgumentDefinition: (
        "steps/toolCallRequest",
        ("params", "context", "agent", "tools", 0, "arguments", 0),
    ),
    aos.ToolOutputDefinition: (
        "steps/toolCallRequest",
        ("params", "context", "agent", "tools", 0, "outputs", 0),
    ),
    aos.MCPServer: ("steps/toolCallRequest", ("params", "context", "agent", "mcpServers", 0)),
    aos.Resource: ("steps/toolCallRequest", ("params", "context", "agent", "resources", 0)),
    aos.Organization: ("steps/toolCallRequest", ("params", "context", "agent", "organization")),
    aos.Session: ("steps/toolCallRequest", ("params", "context", "session")),
    aos.User: ("steps/toolCallRequest", ("params", "context", "user")),
    aos.ToolCallRequest: ("steps/toolCallRequest", ("params", "toolCallRequest")),
    aos.ToolArgumentValue: ("steps/toolCallRequest", ("params", "toolCallRequest", "inputs", 3)),
    aos.ToolCallResult: ("steps/toolCallResult", ("params", "result")),
    aos.Message: ("steps/message", ("params", "message")),
    aos.TextPart: ("steps/message", ("params", "message", "content", 0)),
    aos.FilePart: ("steps/message", ("params", "message", "content", 1)),
    aos.FileWithBytes: ("steps/message", ("params", "message", "content", 1, "file")),
    aos.FileWithUri: ("steps/message", ("params", "message", "content", 2, "file")),
    aos.DataPart: ("steps/message", ("params", "message", "content", 3)),
    aos.FileSource: ("steps/message", ("params", "citation", 0)),
    aos.SiteSource: ("steps/message", ("params", "citation", 1)),
    aos.AgentTrigger: ("steps/agentTrigger", ("params", "trigger")),
    aos.AgentTriggerEvent: ("steps/agentTrigger", ("params", "trigger", "event")),
    aos.KnowledgeRetrievalStepParams: ("steps/knowledgeRetrieval", ("params", "knowledgeStep")),
    aos.KnowledgeRetrievalResult: ("steps/knowledgeRetrieval", ("params", "knowledgeStep", "results", 0)),
    aos.A2AContext: ("message/send", ("params", "context")),
    aos.A2AParty: ("message/send", ("params", "context", "from")),
    aos.A2AAgent: ("message/send", ("params", "context", "to", "agent")),
}


def _at(document: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


def _roundtrip(model: type[aos.WireModel], wire: Any) -> Any:
    return model.model_validate(wire).model_dump(mode="json", by_alias=True, exclude_none=True)


@pytest.mark.parametrize("model", list(OBJECT_SITES), ids=lambda model: model.__name__)
def test_every_data_object_round_trips(model: type[aos.WireModel], by_method: dict[str, Any]) -> None:
    method, path = OBJECT_SITES[model]
    wire = _at(by_method[method], path)
    assert _roundtrip(model, wire) == wire


def test_every_request_round_trips_through_its_typed_model(sample_request: dict[str, Any]) -> None:
    request = aos.parse_request(sample_request)
    assert type(request) is aos.REQUEST_MODELS[sample_request["method"]]
    assert aos.dump(request) == sample_request
    assert _roundtrip(type(request), sample_request) == sample_request


def test_every_params_model_round_trips(sample_request: dict[str, Any]) -> None:
    params_model = aos.METHODS[sample_request["method"]]
    assert _roundtrip(params_model, sample_request["params"]) == sample_request["params"]


def test_every_response_round_trips(sample_response: dict[str, Any]) -> None:
    response = aos.parse_response(sample_response)
    assert aos.dump(response) == sample_response


def test_the_samples_cover_every_method(samples: dict[str, list[dict[str, Any]]]) -> None:
    assert {request["method"] for request in samples["requests"]} == set(aos.METHODS)


def test_methods_map_every_method_of_section_4_to_its_params() -> None:
    steps = {
        "steps/agentTrigger": aos.AgentTriggerParams,
        "steps/knowledgeRetrieval": aos.KnowledgeRetrievalParams,
        "steps/memoryStore": aos.MemoryStoreParams,
        "steps/memoryContextRetrieval": aos.MemoryContextRetrievalParams,
        "steps/message": aos.MessageParams,
        "steps/toolCallRequest": aos.ToolCallRequestParams,
        "steps/toolCallResult": aos.ToolCallResultParams,
        "ping": aos.PingParams,
        "protocols/MCP": aos.MCPParams,
    }
    a2a = {
        "message/send",
        "message/stream",
        "tasks/pushNotificationConfig/set",
        "tasks/pushNotificationConfig/get",
        "tasks/resubscribe",
        "tasks/cancel",
        "tasks/get",
    }
    assert steps | dict.fromkeys(a2a, aos.A2AParams) == aos.METHODS
    assert a2a == aos.A2A_METHODS
    for name, model in aos.REQUEST_MODELS.items():
        assert model.model_fields["method"].default == name


def test_python_names_build_the_same_object_as_wire_names() -> None:
    by_python = aos.ToolCallRequest(
        execution_id="call-1", tool_id="t", inputs=[aos.ToolArgumentValue(name="x", value=[1, "a"])]
    )
    by_wire = aos.ToolCallRequest.model_validate(
        {"executionId": "call-1", "toolId": "t", "inputs": [{"name": "x", "value": [1, "a"]}]}
    )
    assert by_python == by_wire
    assert aos.dump(by_python) == {
        "executionId": "call-1",
        "toolId": "t",
        "inputs": [{"name": "x", "value": [1, "a"]}],
    }


def test_unknown_members_are_kept_at_every_level(by_method: dict[str, Any]) -> None:
    wire = by_method["steps/toolCallRequest"]
    wire["x-trace"] = {"span": "abc"}
    wire["params"]["x-verdict"] = "deny"
    wire["params"]["toolCallRequest"]["inputs"][0]["x-origin"] = "llm"
    request = aos.parse_request(wire)
    assert request.model_extra == {"x-trace": {"span": "abc"}}
    assert aos.dump(request) == wire


def test_given_nulls_are_kept_and_absent_members_stay_absent() -> None:
    tool = aos.ToolDefinition(name="now", id="now", type="function_call", arguments=None, outputs=None)
    assert aos.dump(tool) == {
        "name": "now",
        "id": "now",
        "type": "function_call",
        "arguments": None,
        "outputs": None,
    }
    argument = aos.ToolArgumentDefinition(name="a", required=True)
    assert aos.dump(argument) == {"name": "a", "required": True}
    assert aos.dump(aos.ToolArgumentDefinition(name="a", required=True, mime_type=None))["mimeType"] is None
    assert aos.dump(aos.ToolArgumentValue(name="a", value=None)) == {"name": "a", "value": None}
    # Without exclude_none, nothing is special: every member is written under its Python or wire name.
    assert tool.model_dump(by_alias=True)["description"] is None
    assert "mime_type" in argument.model_dump()


@pytest.mark.parametrize(
    ("model", "wire"),
    [
        (aos.ToolDefinition, {"name": "t", "id": "t", "type": "function_call", "arguments": None}),
        (aos.ToolArgumentValue, {"name": "a"}),
        (aos.Message, {"id": "m", "role": "user", "content": []}),
        (aos.Message, {"id": "m", "role": "assistant", "content": [{"kind": "text", "text": "hi"}]}),
        (
            aos.AgentTrigger,
            {"type": "scheduled", "event": {"type": "cron", "id": "1"}, "content": [{"text": "x"}]},
        ),
        (aos.DataPart, {"kind": "data", "data": [1, 2]}),
        (aos.FilePart, {"kind": "file", "file": {"bytes": "AA==", "uri": "https://x"}}),
        (aos.Model, {"name": "m", "id": "m", "provider": {"name": "p"}, "maxTokens": "5"}),
        (aos.ToolCallResult, {"outputs": [], "isError": "false"}),
        (aos.ToolCallResult, {"outputs": [{"kind": "data", "data": {}}], "isError": False}),
        (
            aos.StepContext,
            {"agent": {}, "session": {"id": "s"}, "turnId": "t", "stepId": "s", "timestamp": "now"},
        ),
        (aos.User, {"id": 7}),
        (aos.A2AParty, {"agent": {"name": "x"}, "role": "peer"}),
        (aos.AOSSuccessResult, {"decision": "maybe", "message": "m"}),
        (aos.PingRequestResult, {"status": "up", "version": "1", "timestamp": "2025-01-01T00:00:00Z"}),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else "",
)
def test_invalid_objects_are_refused(model: type[aos.WireModel], wire: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(wire)


def test_user_organization_is_optional() -> None:
    assert aos.dump(aos.User(id="u")) == {"id": "u"}


def test_decision_is_a_string_enum_on_the_wire() -> None:
    result = aos.AOSSuccessResult(decision=aos.Decision.MODIFY, message="m", reason_code=["a"])
    assert aos.dump(result) == {"decision": "modify", "message": "m", "reasonCode": ["a"]}
    assert (
        aos.AOSSuccessResult.model_validate({"decision": "deny", "message": "m"}).decision
        is aos.Decision.DENY
    )


def test_utc_timestamp_is_iso_8601_utc() -> None:
    stamp = aos.utc_timestamp()
    assert stamp.endswith("Z")
    aos.PingParams(timestamp=stamp)


def test_the_package_docstring_example_runs() -> None:
    doc = aos.__doc__ or ""
    example = doc.split("::\n\n", 1)[1].split("\n\n\n", 1)[0].split("\nValidating", 1)[0]
    exec(compile(textwrap.dedent(example), "agentguard.aos docstring", "exec"), {})


def test_all_is_explicit_and_complete() -> None:
    exported = set(aos.__all__)
    assert len(exported) == len(aos.__all__)
    assert all(hasattr(aos, name) for name in exported)
    public_classes = {
        name for name, value in vars(aos).items() if isinstance(value, type) and not name.startswith("_")
    }
    assert public_classes <= exported
