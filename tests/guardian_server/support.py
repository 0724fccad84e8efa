"""Requests in both wire shapes and rules for the tests of the reference guardian (and of those using it).

The valid requests come from ``tests/aos/samples.json`` (one per method, in the specification text's
shape). :func:`shapes` gives each one in every shape the guardian must accept: the text's, and the
published schema's where that differs (decision 9).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx

from agentguard import aos

SAMPLES = json.loads((Path(__file__).resolve().parents[1] / "aos" / "samples.json").read_text())
REQUESTS: dict[str, dict[str, Any]] = {request["method"]: request for request in SAMPLES["requests"]}
DECIDED_METHODS = sorted(method for method in REQUESTS if method != "ping")

# Rules that decide by a marker member any params object may carry (unknown members are kept): one rules
# file then exercises allow, deny and modify for every method.
MARKER_RULES = """
rules:
  - name: test-deny
    when: '"x-verdict" in params && params["x-verdict"] == "deny"'
    decision: deny
    message: denied by the test marker
    reason_codes: [test-deny]
  - name: test-modify
    when: '"x-verdict" in params && params["x-verdict"] == "modify"'
    decision: modify
    message: modified by the test marker
    modify:
      cel: '{"x-verdict": "modified"}'
"""

# Both rule sets below redact every e-mail body.
_REDACT_BODY = """\
  - name: redact-body
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "send-email"
    decision: modify
    message: Body redacted
    set:
      params.toolCallRequest.inputs: >-
        params.toolCallRequest.inputs.map(i, i.name == "body" ? {"name": "body", "value": "[redacted]"} : i)
"""

# The rules the Guard's and the client's tests against a live reference guardian share: no ``shell`` tool,
# and ``send-email``'s body redacted. The ``rules`` list comes last, so a test may append rules of its own.
SHELL_AND_EMAIL_RULES = (
    """
rules:
  - name: no-shell
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "shell"
    decision: deny
    message: No shell access
    reason_codes: [shell]
"""
    + _REDACT_BODY
)

# The shop agent's guardian in the adapters' tests (MCP, OpenAI Agents): it denies another tenant's orders and
# redacts every e-mail body.
SHOP_GUARDIAN_RULES = (
    """
default_decision: allow
rules:
  - name: no-foreign-orders
    methods: [steps/toolCallRequest]
    when: >-
      params.toolCallRequest.toolId == "lookup-order" &&
      params.toolCallRequest.inputs.exists(i, i.name == "order_id" && i.value.startsWith("X-"))
    decision: deny
    message: Orders of another tenant
"""
    + _REDACT_BODY
)

_SCHEMA_A2A_SPELLINGS = {
    "tasks/get": "task/get",
    "tasks/pushNotificationConfig/get": "task/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/set": "task/pushNotificationConfig/set",
}


def request_for(method: str, request_id: aos.RequestId | None = 1, **params: Any) -> dict[str, Any]:
    """A fresh valid request for ``method`` (text shape); ``params`` are added to its params."""
    request: dict[str, Any] = copy.deepcopy(REQUESTS[method])
    if request_id is None:
        del request["id"]
    else:
        request["id"] = request_id
    request["params"].update(params)
    return request


def schema_shape(request: dict[str, Any]) -> dict[str, Any] | None:
    """``request`` as the published schema shapes it, or ``None`` where the schema agrees with the text."""
    request = copy.deepcopy(request)
    method = request["method"]
    params = request["params"]
    if method == "steps/toolCallResult":
        params["toolCallResult"] = {"executionId": params.pop("executionId"), "result": params.pop("result")}
    elif method == "steps/message":
        params["citations"] = params.pop("citation")
    elif method == "ping":
        request["timestamp"] = params.pop("timestamp")
    elif method in _SCHEMA_A2A_SPELLINGS:
        request["method"] = _SCHEMA_A2A_SPELLINGS[method]
    else:
        return None
    return request


def shapes(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``request`` in every shape the guardian accepts, by shape name."""
    variants = {"text": request}
    schema = schema_shape(request)
    if schema is not None:
        variants["schema"] = schema
    return variants


def answer_of(response: httpx.Response) -> Any:
    """The JSON body of a JSON-RPC answer, checked for its HTTP framing."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()
