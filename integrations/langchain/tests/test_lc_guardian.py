"""A guarded LangChain agent and a real reference guardian on 127.0.0.1: deny, modify, answers blocked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agentguard_langchain.testing import answer, calls
from langchain_core.messages import ToolMessage

from agentguard import Outcome, Rule
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from integrations.langchain.tests.conftest import BuildAgent, config, make_guard, user_says

RULES = """
default_decision: allow
rules:
  - name: no-foreign-orders
    methods: [steps/toolCallRequest]
    when: >-
      params.toolCallRequest.toolId == "lookup-order" &&
      params.toolCallRequest.inputs.exists(i, i.name == "order_id" && i.value.startsWith("X-"))
    decision: deny
    message: Orders of another tenant
    reason_codes: [cross-tenant]
  - name: redact-body
    methods: [steps/toolCallRequest]
    when: params.toolCallRequest.toolId == "send-email"
    decision: modify
    message: Body redacted
    set:
      params.toolCallRequest.inputs: >-
        params.toolCallRequest.inputs.map(i, i.name == "body" ? {"name": "body", "value": "[redacted]"} : i)
  - name: no-reasoned-exports
    methods: [steps/toolCallRequest]
    when: has(params.reasoning) && params.reasoning.contains("bypass the audit")
    decision: deny
    message: Reasoned past the audit
  - name: no-promises
    methods: [steps/message]
    when: params.message.role == "agent" && params.message.content.exists(p, p.text.contains("guarantee"))
    decision: deny
    message: The agent may not make guarantees
"""


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(RULES))) as server:
        yield server


def _tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def test_guardian_deny_reaches_the_model_and_modify_reaches_the_tool(
    build_agent: BuildAgent, guardian: RunningServer
) -> None:
    guard = make_guard(guardian=GuardianClient(guardian.url))
    h = build_agent(
        [
            calls(("lookup_order", {"order_id": "X-9"})),
            calls(("send_email", {"to": "bob@corp.com", "body": "secret plans"})),
            answer("Done."),
        ],
        guard=guard,
    )
    result = h.agent.invoke(user_says("Check X-9 and tell Bob."), config(), context={"user_id": "u-1"})
    denied, emailed = _tool_messages(result)
    assert denied.status == "error"
    assert "Orders of another tenant" in denied.content
    assert emailed.status == "success"
    assert h.shop.runs.get("lookup_order", 0) == 0  # the denied call never ran
    assert h.shop.runs["send_email"] == 1
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["recent"]["send-email"]["inputs"]["body"] == "[redacted]"  # what the tool got
    outcomes = [(s.name, s.outcome) for s in eng.steps if s.kind == "steps/toolCallRequest"]
    assert outcomes == [("lookup-order", Outcome.DENY), ("send-email", Outcome.MODIFY)]
    guardian_decisions = [d for d in eng.steps[1].decisions if d.rule is Rule.GUARDIAN]
    assert guardian_decisions[0].data is not None
    assert guardian_decisions[0].data.get("reason_code") == "cross-tenant"


def test_a_denied_answer_never_reaches_the_user_async(
    build_agent: BuildAgent, guardian: RunningServer
) -> None:
    guard = make_guard(guardian=GuardianClient(guardian.url))
    h = build_agent([answer("I guarantee a refund by Friday.")], guard=guard)
    result = asyncio.run(
        h.agent.ainvoke(user_says("Will I get a refund?"), config(), context={"user_id": "u-1"})
    )
    final = result["messages"][-1].content
    assert "by Friday" not in final  # the model's answer never reaches the user...
    assert final.startswith("The response was blocked")  # ...the guardian's reason does
    assert "The agent may not make guarantees" in final


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_guardian_reads_the_reasoning_of_the_message_that_asked_for_the_call(
    build_agent: BuildAgent, guardian: RunningServer, flavour: str
) -> None:
    """The middleware sends the text of the AI message that asked for a call as the request's ``reasoning``
    (found only when the guardian is asked): a rule on it decides."""
    guard = make_guard(guardian=GuardianClient(guardian.url))
    h = build_agent(
        [
            calls(("lookup_order", {"order_id": "A-1"}), text="Let me bypass the audit and look it up."),
            calls(("lookup_order", {"order_id": "A-2"}), text="Now the second order."),
            answer("Done."),
        ],
        guard=guard,
    )
    payload, run_config, context = user_says("Check A-1 and A-2."), config(), {"user_id": "u-1"}
    if flavour == "sync":
        result = h.agent.invoke(payload, run_config, context=context)
    else:
        result = asyncio.run(h.agent.ainvoke(payload, run_config, context=context))
    denied, looked_up = _tool_messages(result)
    assert denied.status == "error"
    assert "Reasoned past the audit" in denied.content
    assert looked_up.status == "success"
    assert h.shop.runs["lookup_order"] == 1  # only the call whose reasoning the rule let through ran
