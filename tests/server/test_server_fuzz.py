"""Fuzzing the POST body handling: whatever arrives, a fitting 4xx or a 303 -- never a 500.

For any body and Content-Type, the answer is 303 (an engagement started), 400, 413, 415 or 422, always with
a JSON body; an engagement that started can be read back as JSON and ends ``completed`` with the input as
its output (the runner echoes it). No example is timed (``deadline=None``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from agentguard import Engagement, Guard
from agentguard.server import ServedAgent, create_app
from tests.conftest import spec_text
from tests.server.support import ORDER_SCHEMA

FUZZ = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
LIMIT = 2048
EXPECTED = {303, 400, 413, 415, 422}
CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "application/json; charset=utf-16",
        "APPLICATION/JSON",
        "text/plain",
        "",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ]
)
# strict_json refuses integers past ±(2**53 - 1) (tests/aos/test_aos_strict_integers.py)
EXACT_INTEGERS = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | EXACT_INTEGERS | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=25,
)
OBJECTS = st.dictionaries(
    st.sampled_from(["order_id", "amount", "note", ""]) | st.text(max_size=8), JSON_VALUES
)


async def echo(guard: Guard, engagement: Engagement, input: dict[str, Any]) -> Any:
    return input


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    agents = [
        ServedAgent.from_guard(Guard.from_yaml(spec_text("capabilities: {}\n", name="echo"))),
        ServedAgent.from_guard(
            Guard.from_yaml(spec_text("capabilities: {}\n", name="checked")),
            input_schema=json.loads(ORDER_SCHEMA),
        ),
    ]
    app = create_app(agents, echo, max_body_bytes=LIMIT, max_concurrency=100_000)
    with TestClient(app, follow_redirects=False, raise_server_exceptions=False) as http:
        yield http


def check(client: TestClient, agent: str, content: bytes, content_type: str) -> int:
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post(f"/agents/{agent}", content=content, headers=headers)
    assert response.status_code in EXPECTED, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    if response.status_code == 303:
        location = response.headers["location"]
        assert location == f"/engagements/{body['id']}"
        state = client.get(location, params={"wait": 5})
        assert state.status_code == 200
        assert state.json()["status"] == "completed"
        assert state.json()["output"] == json.loads(content)
    else:
        assert isinstance(body["error"], str)
    return response.status_code


@FUZZ
@given(
    content=st.binary(max_size=3000), content_type=CONTENT_TYPES, agent=st.sampled_from(["echo", "checked"])
)
def test_any_bytes(client: TestClient, content: bytes, content_type: str, agent: str) -> None:
    check(client, agent, content, content_type)


@FUZZ
@given(value=JSON_VALUES | OBJECTS, agent=st.sampled_from(["echo", "checked"]))
def test_any_json(client: TestClient, value: Any, agent: str) -> None:
    content = json.dumps(value).encode()
    status = check(client, agent, content, "application/json")
    if len(content) > LIMIT:
        assert status == 413
    elif not isinstance(value, dict):
        assert status == 400
    elif agent == "echo":
        assert status == 303


@FUZZ
@given(depth=st.integers(min_value=1, max_value=1000))
def test_deeply_nested_input(client: TestClient, depth: int) -> None:
    content = b'{"a": ' + b"[" * depth + b"]" * depth + b"}"
    check(client, "checked", content, "application/json")
