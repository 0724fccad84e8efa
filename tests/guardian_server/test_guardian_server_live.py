"""The reference guardian over a real socket: uvicorn on 127.0.0.1, a free port, driven with httpx."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentguard import aos
from agentguard.guardian.server import (
    GuardianRules,
    RunningServer,
    ServerErrorCode,
    create_app,
    parse_rules,
    serve_in_thread,
)
from tests.guardian_server.support import DECIDED_METHODS, MARKER_RULES, answer_of, request_for, shapes

TOKEN = "test-token-\u00e9"  # a non-ASCII token: compared as the bytes the client sends
LIMIT = 64 * 1024


@dataclasses.dataclass(frozen=True)
class CrashingRules(GuardianRules):
    """The marker rules, plus a failure inside the guardian when params carry ``x-verdict: crash``."""

    def decide(self, request: aos.AOSRequest, wire: aos.JSONObject | None = None) -> aos.AOSSuccessResult:
        params = aos.dump(request).get("params")
        if isinstance(params, dict) and params.get("x-verdict") == "crash":
            raise RuntimeError("the rules engine broke")
        return super().decide(request, wire)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    rules = parse_rules(MARKER_RULES)
    crashing = CrashingRules(rules.rules, rules.default_decision, rules.default_message)
    app = create_app(crashing, token=TOKEN, max_body_bytes=LIMIT, version="9.9.9-test")
    with serve_in_thread(app) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    headers = {b"Authorization": b"Bearer " + TOKEN.encode()}
    with httpx.Client(base_url=server.url, headers=headers) as http:
        yield http


def _post(client: httpx.Client, body: Any, path: str = "/") -> Any:
    return answer_of(client.post(path, json=body))


def _raw(client: httpx.Client, content: bytes, content_type: str = "application/json") -> httpx.Response:
    return client.post("/", content=content, headers={"Content-Type": content_type})


def _error(answer: Any, code: int, request_id: Any) -> dict[str, Any]:
    assert aos.parse_response(answer)  # well-formed
    assert answer["id"] == request_id
    assert answer["error"]["code"] == code
    error: dict[str, Any] = answer["error"]
    return error


# --------------------------------------------------------------------------------------------- ping


@pytest.mark.parametrize("shape", ["text", "schema"])
def test_ping_reports_connected_with_version_and_time(client: httpx.Client, shape: str) -> None:
    answer = _post(client, shapes(request_for("ping", "p-1"))[shape])
    response = aos.parse_response(answer)
    assert isinstance(response, aos.PingRequestSuccessResponse)
    assert (response.id, response.result.status, response.result.version) == (
        "p-1",
        "connected",
        "9.9.9-test",
    )
    assert response.result.timestamp.endswith("Z")


# ------------------------------------------------------------------------- decisions, every method


def _cases() -> list[tuple[str, str]]:
    return [(method, shape) for method in DECIDED_METHODS for shape in shapes(request_for(method))]


@pytest.mark.parametrize(("method", "shape"), _cases())
def test_allow_deny_and_modify_for_every_method_in_every_shape(
    client: httpx.Client, method: str, shape: str
) -> None:
    for verdict in ("allow", "deny", "modify"):
        request = shapes(request_for(method, f"{verdict}-1", **{"x-verdict": verdict}))[shape]
        response = aos.parse_response(_post(client, request))
        assert isinstance(response, aos.AOSSuccessResponse)
        assert response.id == f"{verdict}-1"
        result = response.result
        assert result.decision == verdict
        if verdict == "allow":
            assert (result.message, result.data, result.modified_request) == ("No rule matched", None, None)
        elif verdict == "deny":
            assert result.reason_code == ["test-deny"]
            assert result.data == {"rule": "test-deny"}
        else:
            # A complete replacement request: same id, the text's shape, every member kept but the change.
            expected = request_for(method, f"{verdict}-1", **{"x-verdict": "modified"})
            assert result.modified_request is not None
            assert aos.dump(result.modified_request) == expected


def test_both_endpoints_answer(client: httpx.Client) -> None:
    for path in ("/", "/aos"):
        assert _post(client, request_for("protocols/MCP", 5), path)["result"]["decision"] == "allow"


# ------------------------------------------------------------------------------ JSON-RPC error codes


@pytest.mark.parametrize("body", [b"{", b"", b"\xff\xfe", b"[1,", b'{"a": NaN}', b"nul"])
def test_parse_error(client: httpx.Client, body: bytes) -> None:
    error = _error(answer_of(_raw(client, body)), -32700, None)
    assert error["message"].startswith("Parse error")


@pytest.mark.parametrize(
    ("body", "request_id"),
    [
        ({"jsonrpc": "2.0", "id": 3}, 3),
        ({"jsonrpc": "2.0", "method": 1, "params": "bar"}, None),
        ({"id": 4, "method": "ping"}, 4),
        ("ping", None),
    ],
)
def test_invalid_request(client: httpx.Client, body: Any, request_id: Any) -> None:
    _error(_post(client, body), -32600, request_id)


def test_method_not_found(client: httpx.Client) -> None:
    error = _error(
        _post(client, {"jsonrpc": "2.0", "id": "m", "method": "steps/fly", "params": {}}), -32601, "m"
    )
    assert error["data"] == {"method": "steps/fly"}


def test_invalid_params_name_the_field(client: httpx.Client) -> None:
    request = request_for("steps/toolCallRequest", 9)
    del request["params"]["toolCallRequest"]["inputs"][0]["name"]
    error = _error(_post(client, request), -32602, 9)
    assert error["message"] == "Invalid params: params.toolCallRequest.inputs[0].name: Field required"
    assert error["data"]["errors"] == [
        {"path": "params.toolCallRequest.inputs[0].name", "message": "Field required"}
    ]


def test_internal_error_hides_the_cause(client: httpx.Client) -> None:
    response = client.post("/", json=request_for("steps/memoryStore", 11, **{"x-verdict": "crash"}))
    error = _error(answer_of(response), -32603, 11)
    assert error == {"code": -32603, "message": "Internal error"}
    assert "RuntimeError" not in response.text


# ------------------------------------------------------------------------- batches and notifications


def test_a_batch_is_answered_in_order_without_its_notifications(client: httpx.Client) -> None:
    batch = [
        request_for("steps/message", "b-1"),
        request_for("steps/message", None),  # notification
        {"jsonrpc": "2.0", "id": "b-3", "method": "nope"},
        1,
        request_for("ping", "b-5"),
        request_for("steps/memoryStore", "b-6", **{"x-verdict": "deny"}),
    ]
    answers = _post(client, batch)
    assert [a["id"] for a in answers] == ["b-1", "b-3", None, "b-5", "b-6"]
    assert [a.get("error", {}).get("code") for a in answers] == [None, -32601, -32600, None, None]
    assert answers[4]["result"]["decision"] == "deny"
    for answer in answers:
        aos.parse_response(answer)


def test_an_empty_batch_is_one_invalid_request(client: httpx.Client) -> None:
    _error(_post(client, []), -32600, None)


def test_a_batch_of_invalid_values_gets_one_error_each(client: httpx.Client) -> None:
    answers = _post(client, [1, 2, 3])
    assert [(a["id"], a["error"]["code"]) for a in answers] == [(None, -32600)] * 3


def test_notifications_get_no_content(client: httpx.Client) -> None:
    notifications = [
        request_for("steps/toolCallRequest", None),
        request_for("steps/toolCallRequest", None, **{"x-verdict": "deny"}),
        {"jsonrpc": "2.0", "method": "steps/nope"},  # unknown method: still a notification
        {"jsonrpc": "2.0", "method": "steps/memoryStore", "params": {}},  # invalid params: still not answered
        request_for("steps/memoryStore", None, **{"x-verdict": "crash"}),  # even an internal error
    ]
    for notification in notifications:
        response = client.post("/", json=notification)
        assert (response.status_code, response.content) == (204, b"")
    response = client.post("/", json=notifications)
    assert (response.status_code, response.content) == (204, b"")


# -------------------------------------------------------------------------------------------- HTTP


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "Application/JSON; charset=UTF-8", 'application/json; charset="utf-8"'],
)
def test_json_content_types_are_accepted(client: httpx.Client, content_type: str) -> None:
    answer = answer_of(
        _raw(
            client,
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"timestamp":"2025-01-01"}}',
            content_type,
        )
    )
    assert answer["result"]["status"] == "connected"


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/json; charset=latin-1",
        "application/jsonx",
    ],
)
def test_other_content_types_are_415(client: httpx.Client, content_type: str) -> None:
    response = _raw(client, b"{}", content_type)
    assert response.status_code == 415
    _error(response.json(), ServerErrorCode.UNSUPPORTED_MEDIA_TYPE, None)


def test_a_missing_content_type_is_415(client: httpx.Client) -> None:
    request = client.build_request("POST", "/", content=b"{}")  # raw content: httpx sets no Content-Type
    assert "content-type" not in request.headers
    assert client.send(request).status_code == 415


def test_a_body_over_the_limit_is_413_declared_or_streamed(client: httpx.Client) -> None:
    big = b'{"pad": "' + b"x" * LIMIT + b'"}'
    response = _raw(client, big)
    assert response.status_code == 413
    _error(response.json(), ServerErrorCode.PAYLOAD_TOO_LARGE, None)

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
        yield big[:LIMIT]
        yield big[LIMIT:]

    streamed = client.post("/", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413
    assert _raw(client, b" " * (LIMIT - 2) + b"[]").status_code == 200  # at the limit: read


@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        (None, 'Bearer realm="agentguard-guardian"'),
        ("Bearer", 'Bearer realm="agentguard-guardian"'),
        ("Basic dGVzdDp0ZXN0", 'Bearer realm="agentguard-guardian"'),
        ("Bearer wrong-token", 'Bearer realm="agentguard-guardian", error="invalid_token"'),
        ("Bearer test-token-", 'Bearer realm="agentguard-guardian", error="invalid_token"'),
    ],
)
def test_without_the_token_it_is_401(
    server: RunningServer, authorization: str | None, challenge: str
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = httpx.post(server.url, json=request_for("ping"), headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == challenge
    _error(response.json(), ServerErrorCode.UNAUTHORIZED, None)


def test_the_scheme_is_case_insensitive(server: RunningServer) -> None:
    headers = {b"Authorization": b"bearer " + TOKEN.encode()}
    assert httpx.post(server.url, json=request_for("ping"), headers=headers).status_code == 200


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_post_is_allowed(client: httpx.Client, method: str) -> None:
    for path in ("/", "/aos"):
        response = client.request(method, path)
        assert response.status_code == 405
        assert response.headers["allow"] == "POST"
        _error(response.json(), ServerErrorCode.METHOD_NOT_ALLOWED, None)


def test_other_paths_are_404(client: httpx.Client) -> None:
    assert client.post("/rpc", json=request_for("ping")).status_code == 404


# ---------------------------------------------------------------------------------- serve_in_thread


def test_serve_in_thread_binds_a_free_loopback_port_and_stops(marker_rules: GuardianRules) -> None:
    running = serve_in_thread(create_app(marker_rules))
    assert running.url.startswith("http://127.0.0.1:")
    assert running.url.endswith("/")
    assert httpx.post(running.url, json=request_for("ping")).json()["result"]["status"] == "connected"
    running.stop()
    running.stop()  # idempotent
    with pytest.raises(httpx.ConnectError):
        httpx.post(running.url, json=request_for("ping"))


def test_serve_in_thread_refuses_a_port_in_use(marker_rules: GuardianRules) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="in use"):
            serve_in_thread(create_app(marker_rules), port=taken.getsockname()[1])
