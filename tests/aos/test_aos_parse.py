"""parse_request / parse_response / normalize_request: which refusal, for what, naming which field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentguard import aos

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _refusal(obj: Any) -> aos.AOSRequestError:
    with pytest.raises(aos.AOSRequestError) as caught:
        aos.parse_request(obj)
    return caught.value


# ------------------------------------------------------------------------------------------ -32600


@pytest.mark.parametrize(
    ("obj", "request_id"),
    [
        ([], None),
        ("steps/message", None),
        (None, None),
        ({"id": 1, "method": "ping", "params": {}}, 1),
        ({"jsonrpc": "1.0", "id": "a", "method": "ping"}, "a"),
        ({"jsonrpc": 2.0, "id": 1, "method": "ping"}, 1),
        ({"jsonrpc": "2.0", "id": 1}, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": 7}, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"}, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": None}, 1),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": [1], "method": "ping"}, None),
    ],
)
def test_not_a_json_rpc_request_is_an_invalid_request(obj: Any, request_id: Any) -> None:
    error = _refusal(obj)
    assert isinstance(error, aos.InvalidRequestError)
    assert error.code == aos.ErrorCode.INVALID_REQUEST == -32600
    assert error.request_id == request_id
    response = aos.dump(error.to_response())
    assert response == {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32600, "message": error.message},
    }


# ------------------------------------------------------------------------------------------ -32601


@pytest.mark.parametrize("method", ["steps/foo", "steps/toolcallrequest", "task/get", "", "rpc.discover"])
def test_an_unknown_method_is_method_not_found(method: str) -> None:
    error = _refusal({"jsonrpc": "2.0", "id": "r-1", "method": method, "params": {}})
    assert isinstance(error, aos.MethodNotFoundError)
    assert (error.code, error.request_id, error.method) == (-32601, "r-1", method)
    assert aos.dump(error.to_response())["error"] == {
        "code": -32601,
        "message": f"Method not found: {method}",
        "data": {"method": method},
    }


def test_method_not_found_is_checked_before_params() -> None:
    assert isinstance(
        _refusal({"jsonrpc": "2.0", "id": 1, "method": "steps/foo", "params": [1]}), aos.MethodNotFoundError
    )


# ------------------------------------------------------------------------------------------ -32602


def _invalid_params(request: dict[str, Any]) -> aos.InvalidParamsError:
    error = _refusal(request)
    assert isinstance(error, aos.InvalidParamsError)
    assert error.code == -32602
    assert error.request_id == request.get("id")
    return error


@pytest.mark.parametrize(
    ("method", "change", "path"),
    [
        (
            "steps/toolCallRequest",
            lambda p: p["toolCallRequest"].pop("toolId"),
            "params.toolCallRequest.toolId",
        ),
        (
            "steps/toolCallRequest",
            lambda p: p["toolCallRequest"]["inputs"][1].pop("value"),
            "params.toolCallRequest.inputs[1].value",
        ),
        (
            "steps/toolCallRequest",
            lambda p: p["context"].update(timestamp="yesterday"),
            "params.context.timestamp",
        ),
        (
            "steps/toolCallRequest",
            lambda p: p["context"]["agent"]["model"].update(maxTokens="5"),
            "params.context.agent.model.maxTokens",
        ),
        ("steps/toolCallResult", lambda p: p["result"].update(isError="false"), "params.result.isError"),
        ("steps/toolCallResult", lambda p: p.pop("executionId"), "params.executionId"),
        ("steps/message", lambda p: p["message"]["content"][0].pop("text"), "params.message.content[0].text"),
        (
            "steps/message",
            lambda p: p["message"]["content"][1]["file"].pop("bytes"),
            "params.message.content[1].file.uri",
        ),
        (
            "steps/message",
            lambda p: p["message"]["content"][3].update(kind="video"),
            "params.message.content[3]",
        ),
        ("steps/message", lambda p: p["citation"][1].pop("url"), "params.citation[1].url"),
        ("steps/message", lambda p: p["message"].update(content=[]), "params.message.content"),
        ("steps/agentTrigger", lambda p: p["trigger"].update(type="manual"), "params.trigger.type"),
        (
            "steps/knowledgeRetrieval",
            lambda p: p["knowledgeStep"].pop("results"),
            "params.knowledgeStep.results",
        ),
        ("steps/memoryStore", lambda p: p.update(memory=[{"k": "v"}]), "params.memory[0]"),
        ("ping", lambda p: p.update(timeout=1.5), "params.timeout"),
        ("message/send", lambda p: p.update(payload="raw"), "params.payload"),
        ("message/send", lambda p: p["context"]["to"].update(role="peer"), "params.context.to.role"),
        ("protocols/MCP", lambda p: p.pop("message"), "params.message"),
    ],
)
def test_invalid_params_name_the_field(
    by_method: dict[str, Any], method: str, change: Any, path: str
) -> None:
    request = by_method[method]
    change(request["params"])
    error = _invalid_params(request)
    assert error.errors[0].path == path
    assert error.message.startswith(f"Invalid params: {path}: ")
    data = aos.dump(error.to_response())["error"]["data"]
    assert data["errors"][0]["path"] == path


def test_every_failing_field_is_listed(by_method: dict[str, Any]) -> None:
    request = by_method["steps/toolCallRequest"]
    del request["params"]["context"]["session"]
    del request["params"]["toolCallRequest"]["executionId"]
    paths = [e.path for e in _invalid_params(request).errors]
    assert paths == ["params.context.session", "params.toolCallRequest.executionId"]


def test_missing_and_positional_params_are_invalid_params(by_method: dict[str, Any]) -> None:
    request = by_method["steps/memoryStore"]
    del request["params"]
    assert _invalid_params(request).errors[0].path == "params"
    request["params"] = ["positional"]
    assert _invalid_params(request).errors[0].path == "params"


def test_a_file_with_both_bytes_and_uri_is_refused(by_method: dict[str, Any]) -> None:
    request = by_method["steps/message"]
    request["params"]["message"]["content"][1]["file"]["uri"] = "https://x"
    error = _invalid_params(request).errors[0]
    assert (error.path, error.message) == (
        "params.message.content[1].file",
        "a file has either 'bytes' or 'uri', not both",
    )


def test_a_notification_parses_with_no_id(by_method: dict[str, Any]) -> None:
    request = by_method["steps/memoryStore"]
    del request["id"]
    parsed = aos.parse_request(request)
    assert parsed.id is None
    assert "id" not in aos.dump(parsed)


def test_the_schema_shape_needs_normalizing(by_method: dict[str, Any]) -> None:
    request = by_method["steps/toolCallResult"]
    params = request["params"]
    params["toolCallResult"] = {"executionId": params.pop("executionId"), "result": params.pop("result")}
    with pytest.raises(aos.InvalidParamsError):
        aos.parse_request(request)
    assert aos.dump(aos.parse_request(aos.normalize_request(request))) == aos.normalize_request(request)


# ---------------------------------------------------------------------------------- normalize_request


def test_normalize_lifts_tool_call_result(by_method: dict[str, Any]) -> None:
    text_shape = by_method["steps/toolCallResult"]
    schema_shape = copy.deepcopy(text_shape)
    params = schema_shape["params"]
    params["toolCallResult"] = {"executionId": params.pop("executionId"), "result": params.pop("result")}
    before = copy.deepcopy(schema_shape)
    assert aos.normalize_request(schema_shape) == text_shape
    assert schema_shape == before  # the input is not modified


def test_normalize_renames_citations_and_supplies_an_empty_list(by_method: dict[str, Any]) -> None:
    text_shape = by_method["steps/message"]
    schema_shape = copy.deepcopy(text_shape)
    schema_shape["params"]["citations"] = schema_shape["params"].pop("citation")
    assert aos.normalize_request(schema_shape) == text_shape
    del schema_shape["params"]["citations"]
    assert aos.normalize_request(schema_shape)["params"]["citation"] == []


def test_normalize_moves_a_top_level_ping_timestamp(by_method: dict[str, Any]) -> None:
    schema_shape = {"jsonrpc": "2.0", "id": 1, "method": "ping", "timestamp": "2025-07-01T12:00:00Z"}
    assert aos.normalize_request(schema_shape) == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "ping",
        "params": {"timestamp": "2025-07-01T12:00:00Z"},
    }
    with_params = {**schema_shape, "params": {"timeout": 10}}
    assert aos.normalize_request(with_params)["params"] == {
        "timeout": 10,
        "timestamp": "2025-07-01T12:00:00Z",
    }


@pytest.mark.parametrize(
    ("spelled", "method"),
    [
        ("task/get", "tasks/get"),
        ("task/pushNotificationConfig/get", "tasks/pushNotificationConfig/get"),
        ("task/pushNotificationConfig/set", "tasks/pushNotificationConfig/set"),
    ],
)
def test_normalize_respells_the_schemas_a2a_methods(
    by_method: dict[str, Any], spelled: str, method: str
) -> None:
    text_shape = by_method[method]
    assert aos.normalize_request({**text_shape, "method": spelled}) == text_shape


def test_normalize_moves_a2a_members_from_the_top_level_into_params(by_method: dict[str, Any]) -> None:
    text_shape = by_method["message/send"]
    table_shape = {key: value for key, value in text_shape.items() if key != "params"} | text_shape["params"]
    assert aos.normalize_request(table_shape) == text_shape


def test_normalize_leaves_text_shapes_and_non_requests_alone(sample_request: dict[str, Any]) -> None:
    assert aos.normalize_request(sample_request) == sample_request
    for other in ([], "x", {"method": 1}, {"jsonrpc": "2.0"}, {"method": "steps/message", "params": [1]}):
        assert aos.normalize_request(other) == other


def _outcome(obj: Any) -> aos.AOSRequest | aos.AOSRequestError:
    try:
        return aos.parse_request(aos.normalize_request(obj))
    except aos.AOSRequestError as error:
        return error


@settings(deadline=None)
@given(JSON)
def test_normalize_and_parse_accept_or_refuse_any_json(obj: Any) -> None:
    outcome = _outcome(obj)
    if isinstance(outcome, aos.AOSRequestError):
        json.dumps(aos.dump(outcome.to_response()), allow_nan=False)
    else:
        assert outcome.method in aos.METHODS


@settings(max_examples=200, deadline=None)
@given(method=st.sampled_from(sorted(aos.METHODS)), params=JSON, request_id=st.integers() | st.text())
def test_random_params_for_a_known_method_are_a_typed_refusal(
    method: str, params: Any, request_id: Any
) -> None:
    outcome = _outcome({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    if isinstance(outcome, aos.AOSRequestError):
        assert outcome.code in (-32600, -32602)
        assert outcome.request_id == request_id
        json.dumps(aos.dump(outcome.to_response()), allow_nan=False)
    else:
        assert outcome.id == request_id


def test_a_params_failing_in_many_fields_lists_the_first_hundred(
    by_method: dict[str, dict[str, Any]],
) -> None:
    """Listing all 200,000 failing fields of a 400 KB ``params`` took a guardian 1.7 s of CPU per request (now
    about a third of it, mostly pydantic's own), and its answer was forty times the request."""
    request = copy.deepcopy(by_method["steps/toolCallRequest"])
    request["params"]["toolCallRequest"]["inputs"] = [{}] * 100_000
    error = _invalid_params(request)
    assert len(error.errors) == 100
    assert error.omitted == 199_900
    assert isinstance(error.data, dict)
    assert error.data["omitted"] == 199_900
    assert len(error.data["errors"]) == 100
    modify = {"decision": "modify", "message": "m", "modifiedRequest": request}
    with pytest.raises(aos.AOSResponseError) as caught:
        aos.parse_response({"jsonrpc": "2.0", "id": 1, "result": modify})
    assert len(caught.value.errors) == 100
    assert caught.value.omitted > 0
    assert str(caught.value).endswith(f"(and {caught.value.omitted} more)")


# ------------------------------------------------------------------------------------- parse_response


def test_parse_response_tells_the_three_answers_apart(samples: dict[str, list[dict[str, Any]]]) -> None:
    kinds = [type(aos.parse_response(response)).__name__ for response in samples["responses"]]
    assert kinds == [
        "AOSSuccessResponse",
        "AOSSuccessResponse",
        "AOSSuccessResponse",
        "PingRequestSuccessResponse",
        "JSONRPCErrorResponse",
        "JSONRPCErrorResponse",
        "JSONRPCErrorResponse",
    ]


def test_a_modified_request_is_typed_and_read_in_both_shapes(by_method: dict[str, Any]) -> None:
    text_shape = by_method["steps/toolCallResult"]
    schema_shape = copy.deepcopy(text_shape)
    params = schema_shape["params"]
    params["toolCallResult"] = {"executionId": params.pop("executionId"), "result": params.pop("result")}
    for modified in (text_shape, schema_shape):
        answer = {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"decision": "modify", "message": "m", "modifiedRequest": modified},
        }
        response = aos.parse_response(answer)
        assert isinstance(response, aos.AOSSuccessResponse)
        assert isinstance(response.result.modified_request, aos.ToolCallResultStep)
        assert aos.dump(response.result.modified_request) == text_shape


@pytest.mark.parametrize(
    ("reply", "path"),
    [
        ([], "<document>"),
        ({"jsonrpc": "1.0", "id": 1, "result": {}}, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1}, "<document>"),
        (
            {"jsonrpc": "2.0", "id": 1, "result": {"decision": "allow", "message": "m"}, "error": {}},
            "<document>",
        ),
        ({"jsonrpc": "2.0", "id": 1, "result": {"decision": "perhaps", "message": "m"}}, "result.decision"),
        ({"jsonrpc": "2.0", "id": 1, "result": {"decision": "allow"}}, "result.message"),
        ({"jsonrpc": "2.0", "result": {"decision": "allow", "message": "m"}}, "id"),
        ({"jsonrpc": "2.0", "id": 1, "result": {"status": "connected", "version": "1"}}, "result.timestamp"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}, "error.code"),
        (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"decision": "modify", "message": "m", "modifiedRequest": {"method": "x"}},
            },
            "result.modifiedRequest",
        ),
    ],
)
def test_a_malformed_reply_is_a_response_error(reply: Any, path: str) -> None:
    with pytest.raises(aos.AOSResponseError) as caught:
        aos.parse_response(reply)
    assert caught.value.errors[0].path == path
    assert str(caught.value).startswith("malformed AOS response: ")
