"""What the reference guardian's answers quote of text a client wrote: bounded, against a real server.

A key given twice, an unknown method, a member name a rule copied into an invalid modified request, a
``Content-Encoding`` header, a ``params`` with thousands of failing fields: each was quoted whole into the
answer, so that one request of a megabyte was answered with a megabyte (or, for the failing fields, with
forty times its size) and every log or client that shows the answer showed all of it. The request's ``id``
is the one thing still echoed whole: JSON-RPC requires it, and it is as long as the request made it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentguard.aos import strict_json
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from tests.guardian_server.support import MARKER_RULES, answer_of, request_for

QUOTED = 200  # the most characters of one client text an answer quotes
LISTED = 10  # the most failing fields a -32602 lists
FORGED = "\nFORGED LINE "
# The marker rules, and a rule that writes the tool's id as a member name of something invalid.
RULES = (
    MARKER_RULES
    + """
  - name: key-from-input
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId.startsWith("EVIL-")
    decision: modify
    message: tagged
    set:
      params.context.agent.metadata: '{params.toolCallRequest.toolId: b"not JSON"}'
"""
)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(RULES), max_body_bytes=8 * 1_048_576)) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


def _post(client: httpx.Client, body: Any) -> httpx.Response:
    """``body`` as ASCII JSON (a lone surrogate travels as its ``\\u`` escape)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/", content=content, headers={"Content-Type": "application/json"})


def test_a_key_given_twice_is_quoted_bounded_and_escaped(client: httpx.Client) -> None:
    key = json.dumps("tasks\n\x00\u202e" + "k" * 1_000_000)
    body = f'{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{{key}:1,{key}:2}}}}'.encode()
    response = _post(client, body)
    answer = answer_of(response)
    assert (answer["id"], answer["error"]["code"]) == (None, -32700)
    message = answer["error"]["message"]
    assert message.startswith("Parse error: key 'tasks\\n\\x00\\u202ekkkk"), message[:100]
    assert message.endswith("given twice in an object")
    assert len(message) <= QUOTED, len(message)
    assert message.isprintable(), message  # no newline, NUL or bidi override: escaped
    assert len(response.content) <= 2 * QUOTED


def test_strict_json_quotes_a_key_given_twice_bounded() -> None:
    """The message itself (``agentguard serve`` and the guardian client show it too)."""
    key = json.dumps("\n" + "k" * 1_000_000)
    with pytest.raises(ValueError, match="given twice in an object") as raised:
        strict_json(f"{{{key}:1,{key}:2}}")
    assert len(str(raised.value)) <= QUOTED
    assert str(raised.value).isprintable()


def test_an_unknown_method_is_quoted_bounded(client: httpx.Client) -> None:
    method = "tasks/send" + FORGED + "A" * 1_000_000 + "\x00\ud800"
    response = _post(client, {"jsonrpc": "2.0", "id": "m-1", "method": method, "params": {}})
    answer = answer_of(response)
    assert (answer["id"], answer["error"]["code"]) == ("m-1", -32601)
    error = answer["error"]
    # The client's characters are kept (JSON escapes them on the wire), the middle cut out.
    assert error["message"].startswith("Method not found: tasks/send" + FORGED + "AAA")
    assert error["message"].endswith("AAA\x00\ud800")
    assert len(error["message"]) <= QUOTED
    assert error["data"]["method"].startswith("tasks/send" + FORGED + "AAA")
    assert len(error["data"]["method"]) <= QUOTED
    assert len(response.content) <= 4 * QUOTED


def test_a_short_unknown_method_is_quoted_whole(client: httpx.Client) -> None:
    answer = answer_of(_post(client, {"jsonrpc": "2.0", "id": 2, "method": "tasks/send", "params": {}}))
    assert answer["error"] == {
        "code": -32601,
        "message": "Method not found: tasks/send",
        "data": {"method": "tasks/send"},
    }


def test_invalid_params_list_a_bounded_number_of_fields(client: httpx.Client) -> None:
    request = request_for("steps/toolCallRequest")
    request["params"]["toolCallRequest"]["inputs"] = [{}] * 50_000  # each misses its name and its value
    response = _post(client, request)
    answer = answer_of(response)
    error = answer["error"]
    assert error["code"] == -32602
    assert error["message"] == "Invalid params: params.toolCallRequest.inputs[0].name: Field required"
    assert error["data"]["errors"][:2] == [
        {"path": "params.toolCallRequest.inputs[0].name", "message": "Field required"},
        {"path": "params.toolCallRequest.inputs[0].value", "message": "Field required"},
    ]
    assert len(error["data"]["errors"]) == LISTED
    assert error["data"]["omitted"] == 100_000 - LISTED
    assert len(response.content) <= 2_000


def test_an_invalid_modification_quotes_the_clients_member_name_bounded(client: httpx.Client) -> None:
    request = request_for("steps/toolCallRequest")
    request["params"]["toolCallRequest"]["toolId"] = "EVIL-" + FORGED + "x" * 500_000
    response = _post(client, request)
    result = answer_of(response)["result"]
    assert (result["decision"], result["reasonCode"]) == ("deny", ["modify-failed"])
    (rule_error,) = result["data"]["ruleErrors"]
    assert rule_error["error"].startswith(
        "the modified request is invalid: Invalid params: params.context.agent.metadata.EVIL-" + FORGED
    )
    assert rule_error["error"].endswith("xxx: input was not a valid JSON value")
    assert len(rule_error["error"]) <= 2 * QUOTED
    assert len(response.content) <= 1_000


def test_a_content_coding_is_quoted_bounded(client: httpx.Client) -> None:
    headers = {"Content-Type": "application/json", "Content-Encoding": "x" * 60_000}
    response = client.post("/", content=b"{}", headers=headers)
    assert response.status_code == 415
    message = response.json()["error"]["message"]
    assert message.startswith("Unsupported media type: content-encoding xxx")
    assert message.endswith("xxx: send the body uncompressed")
    assert len(message) <= 2 * QUOTED


def test_every_answer_of_a_full_batch_is_bounded(client: httpx.Client) -> None:
    """At most ``max_batch`` answers, none of them longer than its id and a few quoted texts."""
    many_fields = request_for("steps/toolCallRequest", "fields")
    many_fields["params"]["toolCallRequest"]["inputs"] = [{}] * 2_000
    evil_key = request_for("steps/toolCallRequest", "key")
    evil_key["params"]["toolCallRequest"]["toolId"] = "EVIL-" + "x" * 20_000
    hostile = [
        {"jsonrpc": "2.0", "id": "method", "method": "x" * 20_000, "params": {}},
        many_fields,
        evil_key,
        1,
        {"jsonrpc": "2.0", "id": "i" * 20_000, "method": "ping"},  # the id is echoed: JSON-RPC wants it
    ]
    batch = (hostile * 20)[:100]  # the default max_batch
    answers = answer_of(_post(client, batch))
    assert len(answers) == 100
    for answer in answers:
        text = json.dumps(answer)
        assert len(text) - len(json.dumps(answer.get("id"))) <= 2_000, text[:200]
