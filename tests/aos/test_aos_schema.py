"""agentguard's AOS wire JSON validates against the AOS authors' published JSON Schema (defects patched).

The patches and why each is needed: ``schema_check.py``. The last tests check that the patched schema
still refuses what the text refuses, and that the published schema still has the defects patched.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentguard import aos
from tests.aos.schema_check import (
    REQUEST_DEFINITIONS,
    errors_against,
    patched_schema,
    published_schema,
    schema_errors,
)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    try:
        return patched_schema()
    except FileNotFoundError as error:
        pytest.fail(str(error))


def test_every_request_validates(schema: dict[str, Any], sample_request: dict[str, Any]) -> None:
    wire = aos.dump(aos.parse_request(sample_request))
    assert errors_against(schema, REQUEST_DEFINITIONS[wire["method"]], wire) == []
    assert errors_against(schema, "ASOPRequest", wire) == []  # exactly one request definition matches


def test_schema_errors_picks_the_definition_by_method_or_as_a_response(
    by_method: dict[str, Any], samples: dict[str, list[dict[str, Any]]]
) -> None:
    assert schema_errors(by_method["steps/message"]) == []
    assert schema_errors(samples["responses"][0]) == []
    assert schema_errors({"jsonrpc": "2.0", "id": 1, "method": "steps/message", "params": {}}) != []
    assert schema_errors({"jsonrpc": "2.0", "id": 1, "method": "nope"}) != []
    assert schema_errors({"jsonrpc": "2.0", "id": 1, "result": {"decision": "maybe", "message": "m"}}) != []


def test_every_response_validates(schema: dict[str, Any], sample_response: dict[str, Any]) -> None:
    wire = aos.dump(aos.parse_response(sample_response))
    assert errors_against(schema, "ASOPResponse", wire) == []


def test_requests_built_in_python_validate(schema: dict[str, Any]) -> None:
    context = aos.StepContext(
        agent=aos.Agent(
            name="a", id="a", instructions="i", version="1", provider=aos.AgentProvider(name="p", url="u")
        ),
        session=aos.Session(id="s"),
        turn_id="t",
        step_id="s",
        timestamp=aos.utc_timestamp(),
        user=aos.User(id="u"),
    )
    requests: list[aos.JSONRPCRequest[Any]] = [
        aos.MessageStep(
            id=1,
            params=aos.MessageParams(
                context=context,
                message=aos.Message(id="m", role="user", content=[aos.TextPart(text="hi")]),
                citation=[],
            ),
        ),
        aos.ToolCallResultStep(
            id="2",
            params=aos.ToolCallResultParams(
                context=context, execution_id="e", result=aos.ToolCallResult(outputs=[], is_error=True)
            ),
        ),
        aos.PingRequest(id=3, params=aos.PingParams(timestamp=aos.utc_timestamp())),
        aos.A2ATasksGet(
            id=4, params=aos.A2AParams(payload={"jsonrpc": "2.0", "id": 1, "method": "tasks/get"})
        ),
        aos.MCPMessage(id=5, params=aos.MCPParams(message={"jsonrpc": "2.0", "method": "ping"})),
    ]
    for request in requests:
        wire = aos.dump(request)
        assert errors_against(schema, REQUEST_DEFINITIONS[wire["method"]], wire) == [], wire["method"]


def test_error_responses_built_by_parse_request_validate(schema: dict[str, Any]) -> None:
    refusals = [
        {"jsonrpc": "2.0", "id": 1, "method": "steps/nope"},
        [],
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    ]
    for refusal in refusals:
        with pytest.raises(aos.AOSRequestError) as caught:
            aos.parse_request(refusal)
        assert errors_against(schema, "JSONRPCErrorResponse", aos.dump(caught.value.to_response())) == []


@pytest.mark.parametrize(
    ("method", "change"),
    [
        ("steps/toolCallRequest", lambda r: r["params"]["toolCallRequest"].pop("toolId")),
        ("steps/toolCallResult", lambda r: r["params"].pop("executionId")),
        ("steps/message", lambda r: r["params"].pop("citation")),
        ("ping", lambda r: r["params"].pop("timestamp")),
        ("message/send", lambda r: r["params"].pop("payload")),
        ("tasks/get", lambda r: r.update(method="task/get")),
        ("protocols/MCP", lambda r: r["params"].pop("message")),
        ("steps/agentTrigger", lambda r: r["params"]["context"]["agent"].pop("version")),
    ],
)
def test_the_patched_schema_still_refuses_what_the_text_refuses(
    schema: dict[str, Any], by_method: dict[str, Any], method: str, change: Any
) -> None:
    request = by_method[method]
    change(request)
    assert errors_against(schema, REQUEST_DEFINITIONS[method], request) != []


def test_the_published_schema_does_have_the_defects_patched_here(by_method: dict[str, Any]) -> None:
    """If upstream fixes a defect, the matching patch in schema_check.py becomes dead and should go."""
    published = published_schema()
    text_shaped = aos.dump(aos.parse_request(by_method["steps/toolCallResult"]))
    assert errors_against(published, "ToolCallResultStep", text_shaped) != []
    assert errors_against(published, "PingRequest", by_method["ping"]) != []
    assert errors_against(published, "A2AMessageSend", {"anything": "goes"}) == []
    agent = by_method["steps/agentTrigger"]["params"]["context"]["agent"]
    assert errors_against(published, "Agent", agent) != []  # requires the `url` the text lacks
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    assert errors_against(published, "JSONRPCErrorResponse", error) != []
    assert published["$defs"]["A2ATaskGet"]["properties"]["method"]["const"] == "task/get"
