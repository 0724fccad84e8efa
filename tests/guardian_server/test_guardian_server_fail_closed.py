"""Rules fail closed (issue 12 item 11): a request shaped so that a deny rule's condition errors is denied.

The rules are the ones users copy: the example of ``docs/guardian.md`` and the demo's guardian rules. For
each field those rules read, a value of the wrong type (a list where a string was expected, a map, a
number, null...) must never turn the well-typed request's ``deny`` into ``allow``: the answer is a deny,
or a JSON-RPC error when the AOS models refuse the type outright.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentguard.guardian.server import RULE_FAILED, GuardianRules, parse_rules
from agentguard.guardian.server._dispatch import Dispatcher
from tests.guardian_server.support import request_for

ROOT = Path(__file__).resolve().parents[2]
DOCS_EXAMPLE = re.search(
    r"## Writing rules\n\n```yaml\n(.*?)```", (ROOT / "docs" / "guardian.md").read_text(), re.DOTALL
)
DEMO_RULES = (
    ROOT / "integrations" / "langchain" / "src" / "agentguard_langchain" / "demo" / "guardian-rules.yaml"
)


def _docs_rules() -> GuardianRules:
    assert DOCS_EXAMPLE is not None, "docs/guardian.md lost its rules example"
    return parse_rules(DOCS_EXAMPLE.group(1), source="docs/guardian.md")


def _answer(rules: GuardianRules, request: dict[str, Any]) -> dict[str, Any]:
    body = Dispatcher(rules, "test").handle(json.dumps(request).encode())
    assert body is not None
    answer: dict[str, Any] = json.loads(body)
    return answer


def _decision(answer: dict[str, Any]) -> str:
    """``allow``/``deny``/``modify``, or ``error`` for a JSON-RPC error (the client's failure policy)."""
    return "error" if "error" in answer else str(answer["result"]["decision"])


def _tool_call(tool: str, **inputs: Any) -> dict[str, Any]:
    request = request_for("steps/toolCallRequest")
    call = request["params"]["toolCallRequest"]
    call["toolId"] = tool
    call["inputs"] = [{"name": name, "value": value} for name, value in inputs.items()]
    return request


def test_a_list_of_recipients_does_not_turn_the_docs_example_deny_into_allow() -> None:
    rules = _docs_rules()
    well_typed = _answer(rules, _tool_call("send-email", to="x@evil.com", body="hi"))
    assert well_typed["result"]["reasonCode"] == ["external-recipient"]
    answer = _answer(rules, _tool_call("send-email", to=["x@evil.com"], body="hi"))["result"]
    assert answer["decision"] == "deny"
    assert answer["reasonCode"] == ["external-recipient", RULE_FAILED]
    assert answer["data"]["ruleErrors"][0]["rule"] == "no-external-email"
    assert "evil" not in json.dumps(answer)  # the reason names the rule and field, never the request's values


# Each case: a well-typed request the example rules deny, and how to put a wrong-typed value into one field
# those rules read. ``wrap`` receives the well-typed value and returns the value to send.
Mutation = Callable[[dict[str, Any], Any], None]


def _set_input(index: int) -> Callable[[dict[str, Any], Any], None]:
    def mutate(request: dict[str, Any], value: Any) -> None:
        request["params"]["toolCallRequest"]["inputs"][index]["value"] = value

    return mutate


def _set_input_name(request: dict[str, Any], value: Any) -> None:
    request["params"]["toolCallRequest"]["inputs"][0]["name"] = value


def _set_tool(request: dict[str, Any], value: Any) -> None:
    request["params"]["toolCallRequest"]["toolId"] = value


def _set_inputs(request: dict[str, Any], value: Any) -> None:
    request["params"]["toolCallRequest"]["inputs"] = value


CASES: list[tuple[str, Callable[[], GuardianRules], dict[str, Any], Mutation, Any]] = [
    ("docs: to", _docs_rules, _tool_call("send-email", to="x@evil.com"), _set_input(0), "x@evil.com"),
    ("docs: input name", _docs_rules, _tool_call("send-email", to="x@evil.com"), _set_input_name, "to"),
    ("docs: tool", _docs_rules, _tool_call("send-email", to="x@evil.com"), _set_tool, "send-email"),
    (
        "docs: inputs",
        _docs_rules,
        _tool_call("send-email", to="x@evil.com"),
        _set_inputs,
        [{"name": "to", "value": "x@evil.com"}],
    ),
    (
        "demo: order id",
        lambda: parse_rules(DEMO_RULES.read_text()),
        _tool_call("lookup-order", order_id="X-1"),
        _set_input(0),
        "X-1",
    ),
    (
        "demo: input name",
        lambda: parse_rules(DEMO_RULES.read_text()),
        _tool_call("lookup-order", order_id="X-1"),
        _set_input_name,
        "order_id",
    ),
]

# Values of the wrong type, built around the well-typed one so that a lenient reading would still deny.
wrong_types = st.deferred(
    lambda: st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5).map(lambda text: {"value": text}),
        st.lists(st.just(0), min_size=1, max_size=2),
    )
)


def _wrapped(original: Any) -> st.SearchStrategy[Any]:
    return st.one_of(
        wrong_types,
        st.just([original]),
        st.just({"value": original}),
        st.lists(st.one_of(st.just(original), wrong_types), min_size=1, max_size=3),
        st.dictionaries(st.text(max_size=4), st.one_of(st.just(original), wrong_types), max_size=3),
    )


@pytest.mark.parametrize(("name", "load", "request_", "mutate", "original"), CASES, ids=[c[0] for c in CASES])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_wrong_typed_field_never_allows_what_the_well_typed_one_denies(
    name: str,
    load: Callable[[], GuardianRules],
    request_: dict[str, Any],
    mutate: Mutation,
    original: Any,
    data: st.DataObject,
) -> None:
    rules = load()
    assert _decision(_answer(rules, request_)) == "deny", name
    request = copy.deepcopy(request_)
    mutate(request, data.draw(_wrapped(original), label="wrong-typed value"))
    assert _decision(_answer(rules, request)) in ("deny", "error")
