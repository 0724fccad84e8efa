"""Fuzzing the guardian's request handling: whatever arrives, a well-formed answer (or a fitting HTTP status).

Properties, for any input: the guardian never fails internally (no -32603, no HTTP 500), every JSON it
sends is one or more well-formed AOS responses (:func:`agentguard.aos.parse_response` accepts them), and
it stays silent only for notifications. No example is timed (``deadline=None``).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from agentguard import aos
from agentguard.guardian.server import create_app, parse_rules
from agentguard.guardian.server._dispatch import Dispatcher
from tests.guardian_server.support import MARKER_RULES, REQUESTS, shapes

RULES = parse_rules(
    MARKER_RULES
    + """
  - name: rewrite-inputs
    methods: [steps/toolCallRequest]
    when: size(params.toolCallRequest.inputs) > 3
    decision: modify
    message: inputs trimmed
    set:
      params.toolCallRequest.inputs: params.toolCallRequest.inputs.filter(i, i.name != "cc")
"""
)
DISPATCHER = Dispatcher(RULES, "fuzz")
EXPECTED_CODES = {-32700, -32600, -32601, -32602}
FUZZ = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])

# strict_json refuses integers past ±(2**53 - 1) (tests/aos/test_aos_strict_integers.py)
EXACT_INTEGERS = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | EXACT_INTEGERS | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=25,
)
VALID_REQUESTS = [variant for request in REQUESTS.values() for variant in shapes(request).values()]


def _check(body: bytes | None, sent: Any) -> None:
    assert (body is None) == _only_notifications(sent)
    if body is None:
        return
    answer = json.loads(body)
    for item in answer if isinstance(answer, list) else [answer]:
        response = aos.parse_response(item)
        if isinstance(response, aos.JSONRPCErrorResponse):
            assert response.error.code in EXPECTED_CODES, response


def _is_notification(item: Any) -> bool:
    """JSON-RPC 2.0's notification: a valid Request object without ``id`` (an invalid one is answered)."""
    return (
        isinstance(item, dict)
        and "id" not in item
        and item.get("jsonrpc") == "2.0"
        and isinstance(item.get("method"), str)
        and isinstance(item.get("params", {}), dict | list)
    )


def _only_notifications(sent: Any) -> bool:
    return all(map(_is_notification, sent)) if isinstance(sent, list) and sent else _is_notification(sent)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _refuse_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("a key given twice")
    return dict(pairs)


def _refuse_infinite(text: str) -> float:
    if not math.isfinite(float(text)):
        raise ValueError("out of a double's range")
    return float(text)


def _standard(body: bytes) -> Any:
    """``body`` as JSON only if every standards parser reads it alike (else ``ValueError``)."""
    return json.loads(
        body.decode("utf-8"),
        parse_constant=_refuse_constant,
        object_pairs_hook=_refuse_twice,
        parse_float=_refuse_infinite,
    )


@FUZZ
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(body: bytes) -> None:
    answer = DISPATCHER.handle(body)
    try:
        sent = _standard(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        assert answer is not None
        assert json.loads(answer)["error"]["code"] == -32700
    else:
        _check(answer, sent)


@FUZZ
@given(JSON_VALUES)
def test_arbitrary_json_values(value: Any) -> None:
    _check(DISPATCHER.handle(json.dumps(value).encode()), value)


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _paths(value, (*prefix, index))


def _mutate(data: st.DataObject, request: dict[str, Any]) -> Any:
    request = copy.deepcopy(request)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [path for path in _paths(request) if path]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = request
        for key in path[:-1]:
            parent = parent[key]
        operation = data.draw(st.sampled_from(["delete", "replace", "method", "verdict"]))
        if operation == "delete":
            del parent[path[-1]]
        elif operation == "replace":
            parent[path[-1]] = data.draw(JSON_VALUES)
        elif operation == "method":
            request["method"] = data.draw(st.sampled_from([*aos.METHODS, "task/get", "steps/x", ""]))
        elif isinstance(request.get("params"), dict):
            request["params"]["x-verdict"] = data.draw(st.sampled_from(["deny", "modify", "allow", 1, None]))
    return request


@FUZZ
@given(st.data())
def test_near_valid_requests(data: st.DataObject) -> None:
    request = _mutate(data, data.draw(st.sampled_from(VALID_REQUESTS)))
    _check(DISPATCHER.handle(json.dumps(request).encode()), request)


@FUZZ
@given(st.data())
def test_near_valid_batches(data: st.DataObject) -> None:
    size = data.draw(st.integers(1, 4))
    batch = [_mutate(data, data.draw(st.sampled_from(VALID_REQUESTS))) for _ in range(size)]
    body = DISPATCHER.handle(json.dumps(batch).encode())
    _check(body, batch)
    if body is not None:
        answered = json.loads(body)
        assert isinstance(answered, list)
        assert len(answered) == sum(not _is_notification(item) for item in batch)


def _with_a_key_twice(request: dict[str, Any], path: tuple[Any, ...]) -> bytes:
    """``request`` as JSON text whose object at ``path`` gives its first key a second, decoy value (the one
    Python's ``json.loads`` keeps; a parser that keeps the first reads the request as it was)."""
    marker = "__agentguard_twice__"
    document = copy.deepcopy(request)
    target = document
    for key in path:
        target = target[key]
    key, value = next(iter(target.items()))
    target[marker] = None
    text = json.dumps(document)
    decoy = json.dumps({key: {"x-verdict": "deny"} if isinstance(value, dict) else "decoy"})[1:-1]
    return text.replace(f'"{marker}": null', decoy).encode()


@FUZZ
@given(st.data())
def test_a_key_given_twice_anywhere_is_a_parse_error(data: st.DataObject) -> None:
    """Where the agent's parser keeps the first of two values and the guardian's the last, a rule would decide
    on a request the agent does not run (RFC 8259 leaves a repeated name's meaning to the parser): -32700,
    whatever the method, the depth, or whether the request is a notification."""
    request = copy.deepcopy(data.draw(st.sampled_from(VALID_REQUESTS)))
    if data.draw(st.booleans()):
        del request["id"]
    objects = [
        path for path in _paths(request) if _at(request, path) and isinstance(_at(request, path), dict)
    ]
    path = data.draw(st.sampled_from(objects))
    answer = DISPATCHER.handle(_with_a_key_twice(request, path))
    assert answer is not None
    error = json.loads(answer)
    assert error["id"] is None
    assert error["error"]["code"] == -32700
    assert "given twice in an object" in error["error"]["message"]


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1.5e999"])
def test_a_number_past_a_double_is_a_parse_error(number: str) -> None:
    body = json.dumps(VALID_REQUESTS[0]).replace('"jsonrpc"', f'"x-number": {number}, "jsonrpc"', 1)
    answer = json.loads(DISPATCHER.handle(body.encode()) or b"null")
    assert answer["error"]["code"] == -32700
    assert "out of range" in answer["error"]["message"]


def test_valid_requests_are_always_decided() -> None:
    for request in VALID_REQUESTS:
        answer = json.loads(DISPATCHER.handle(json.dumps(request).encode()) or b"null")
        assert "result" in answer, answer


@pytest.fixture(scope="module")
def http() -> Iterator[TestClient]:
    with TestClient(create_app(RULES, token="fuzz-token", max_body_bytes=4096)) as client:
        yield client


@FUZZ
@given(
    method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE"]),
    content_type=st.one_of(
        st.none(),
        st.sampled_from(
            ["application/json", "application/json; charset=utf-8", "text/plain", "application/jsonp"]
        ),
        st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
    ),
    authorization=st.sampled_from(
        [None, "Bearer fuzz-token", "Bearer nope", "Basic x", "bearer fuzz-token", ""]
    ),
    body=st.one_of(st.binary(max_size=6000), JSON_VALUES.map(lambda v: json.dumps(v).encode())),
)
def test_arbitrary_http_requests(
    http: TestClient, method: str, content_type: str | None, authorization: str | None, body: bytes
) -> None:
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if authorization is not None:
        headers["Authorization"] = authorization
    response = http.request(method, "/", content=body, headers=headers)
    assert response.status_code in (200, 204, 401, 405, 413, 415)
    if response.status_code == 204:
        assert response.content == b""
        return
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    for item in answer if isinstance(answer, list) else [answer]:
        aos.parse_response(item)
