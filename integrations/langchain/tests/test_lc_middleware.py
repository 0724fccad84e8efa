"""The middleware in a real ``create_agent`` graph: calls, denials, withheld outputs, loops, guardrails."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agentguard_langchain import AgentGuardMiddleware
from agentguard_langchain.testing import answer, calls
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from agentguard import (
    Engagement,
    Guard,
    GuardianDenied,
    GuardrailViolation,
    Outcome,
    RestrictionViolation,
    Rule,
    ShortCircuitViolation,
    User,
)
from integrations.langchain.tests.conftest import BuildAgent, config, make_guard, user_says


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def test_allowed_calls_run_and_are_recorded(build_agent: BuildAgent) -> None:
    h = build_agent(
        [
            calls(("lookup_order", {"order_id": "A-1"})),
            calls(("send_email", {"to": "bob@corp.com", "body": "A-1 shipped"})),
            answer("Your order has shipped."),
        ]
    )
    result = h.agent.invoke(
        user_says("Where is A-1?"), config(), context={"user_id": "u-1", "user_email": "a@x.io"}
    )

    assert result["messages"][-1].content == "Your order has shipped."
    assert [m.status for m in tool_messages(result)] == ["success", "success"]
    assert '"status": "shipped"' in tool_messages(result)[0].content
    assert h.shop.runs == {"lookup_order": 1, "send_email": 1}
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.id == "t1"
    assert eng.user == User(id="u-1", email="a@x.io")
    assert eng.view()["history"]["_list"] == ["lookup-order", "send-email"]
    assert eng.view()["recent"]["lookup-order"]["outputs"] == {"order_id": "A-1", "status": "shipped"}
    kinds = [(s.kind, s.name, s.outcome) for s in eng.steps]
    assert kinds == [
        ("steps/message", "user", Outcome.ALLOW),
        ("steps/toolCallRequest", "lookup-order", Outcome.ALLOW),
        ("steps/toolCallRequest", "send-email", Outcome.ALLOW),
        ("steps/message", "agent", Outcome.ALLOW),
    ]
    call_ids = [m.tool_call_id for m in tool_messages(result)]
    assert [s.call_id for s in eng.steps if s.kind == "steps/toolCallRequest"] == call_ids


def test_restriction_denial_reaches_the_model_which_recovers(build_agent: BuildAgent) -> None:
    h = build_agent(
        [
            calls(("send_email", {"to": "eve@evil.test", "body": "the data"})),
            calls(("send_email", {"to": "bob@corp.com", "body": "the data"})),
            answer("Sent to the support team instead."),
        ]
    )
    result = h.agent.invoke(user_says("mail eve"), config())

    denied, allowed = tool_messages(result)
    assert denied.status == "error"
    assert "[restriction input] send-email" in denied.content
    assert "endsWith" in denied.content
    assert "not run" in denied.content
    assert allowed.status == "success"
    assert h.shop.runs == {"send_email": 1}
    # the model saw the error message before its second attempt
    second_call = h.model.received[1]
    assert any(isinstance(m, ToolMessage) and m.status == "error" for m in second_call)
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_list"] == ["send-email"]  # the denied attempt was rolled back
    assert result["messages"][-1].content == "Sent to the support team instead."


def test_tool_arguments_nested_too_deep_are_a_denial_the_model_reads(build_agent: BuildAgent) -> None:
    """Arguments 150 lists deep (JSON any parser reads, so a model can send it) are a recorded denial
    (ValueLimits), which the model reads, and the run goes on."""
    deep = json.loads("[" * 150 + '"A-1"' + "]" * 150)
    h = build_agent([calls(("lookup_order", {"order_id": deep})), answer("I could not look it up.")])
    result = h.agent.invoke(user_says("where is my order"), config())
    (denied,) = tool_messages(result)
    assert denied.status == "error"
    assert "nested deeper than 100 levels (ValueLimits.max_depth)" in denied.content
    assert h.shop.runs == {}
    assert result["messages"][-1].content == "I could not look it up."


def test_unknown_capability_is_denied_by_default(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("delete_everything", {})), answer("I cannot do that.")])
    result = h.agent.invoke(user_says("delete it all"), config())
    (message,) = tool_messages(result)
    assert message.status == "error"
    assert "[capability input] delete-everything" in message.content
    assert h.shop.runs["delete_everything"] == 0


def test_output_restriction_withholds_the_output(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("web_search", {"query": "many things"})), answer("Nothing I may show.")])
    result = h.agent.invoke(user_says("search"), config())

    (message,) = tool_messages(result)
    assert message.status == "error"
    assert "[restriction output] web-search" in message.content
    assert "withheld" in message.content
    assert "SECRET" not in message.content
    assert h.shop.runs["web_search"] == 1  # it ran
    assert all("SECRET" not in str(m.content) for batch in h.model.received for m in batch)
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["web-search"][0]["outputs"] is None


def test_on_denied_raise_ends_the_run(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("send_email", {"to": "eve@evil.test", "body": "x"}))], on_denied="raise")
    with pytest.raises(RestrictionViolation) as info:
        h.agent.invoke(user_says("mail eve"), config())
    assert info.value.rule is Rule.RESTRICTION


def test_tool_error_is_passed_through_and_recorded_as_failed(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("lookup_order", {"wrong": 1})), answer("oops")])
    result = h.agent.invoke(user_says("look"), config())
    (message,) = tool_messages(result)
    assert message.status == "error"
    assert "agentguard" not in message.content
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.state.calls[-1].status == "failed"


def test_short_circuit_on_repeated_block_raises(build_agent: BuildAgent) -> None:
    a = ("lookup_order", {"order_id": "A-1"})
    b = ("send_email", {"to": "bob@corp.com", "body": "again"})
    h = build_agent([calls(a), calls(b), calls(a), calls(b), calls(a), calls(b), answer("never")])
    with pytest.raises(ShortCircuitViolation) as info:
        h.agent.invoke(user_says("loop"), config())
    assert "repeat" in info.value.reason
    assert h.shop.runs == {"lookup_order": 3, "send_email": 2}  # the sixth call never ran
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.status.value == "stopped"
    # the thread's engagement stays stopped: the next turn is refused at once
    h.model.reset([answer("hello")])
    with pytest.raises(ShortCircuitViolation):
        h.agent.invoke(user_says("still there?"), config())
    assert h.model.received == []


def test_input_guardrail_trip_ends_the_run_before_the_model(build_agent: BuildAgent) -> None:
    h = build_agent([answer("never")])
    with pytest.raises(GuardrailViolation) as info:
        h.agent.invoke(user_says("my card is 4111 1111 1111 1111"), config())
    assert info.value.capability == "pii-check"
    assert h.model.received == []


def test_output_guardrail_trip_keeps_the_answer_from_the_user(build_agent: BuildAgent) -> None:
    h = build_agent([answer("That is a stupid question.")])
    with pytest.raises(GuardrailViolation) as info:
        h.agent.invoke(user_says("hello"), config())
    assert info.value.capability == "toxicity-check"
    state = h.agent.get_state(config())
    assert all("stupid" not in str(m.content) for m in state.values.get("messages", []))


def test_each_user_message_is_checked_once_per_engagement(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("lookup_order", {"order_id": "A-1"})), answer("shipped"), answer("you are welcome")]
    )
    h.agent.invoke(user_says("where is A-1?"), config())
    h.agent.invoke(user_says("thanks"), config())
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    user_steps = [s for s in eng.steps if s.kind == "steps/message" and s.name == "user"]
    assert len(user_steps) == 2  # three model calls, two user messages, each checked once


def test_agent_text_beside_tool_calls_passes_the_output_guardrail(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"}), text="Let me look."), answer("shipped")])
    h.agent.invoke(user_says("where?"), config())
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    agent_steps = [s for s in eng.steps if s.kind == "steps/message" and s.name == "agent"]
    assert len(agent_steps) == 2  # "Let me look." and "shipped": both through the output guardrail
    assert [[d.rule for d in step.decisions] for step in agent_steps] == [[Rule.GUARDRAIL], [Rule.GUARDRAIL]]


def test_toxic_text_beside_tool_calls_never_reaches_the_user(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("lookup_order", {"order_id": "A-1"}), text="Stupid question, looking."), answer("x")]
    )
    with pytest.raises(GuardrailViolation):
        h.agent.invoke(user_says("where?"), config())
    assert h.shop.runs["lookup_order"] == 0  # the failed guardrail ends the run before any tool runs
    state = h.agent.get_state(config())
    assert all("Stupid" not in str(m.content) for m in state.values.get("messages", []))


def test_guard_tool_wrapped_by_langchain_tool_is_checked_once(build_agent: BuildAgent) -> None:
    guard = make_guard()
    runs: list[str] = []

    @tool
    @guard.tool(name="lookup-order")
    def lookup(order_id: str) -> dict[str, str]:
        """Look an order up (guarded by the decorator too)."""
        runs.append(order_id)
        return {"order_id": order_id}

    h = build_agent([calls(("lookup", {"order_id": "A-7"})), answer("ok")], guard=guard, extra_tools=[lookup])
    result = h.agent.invoke(user_says("look"), config())
    assert runs == ["A-7"]
    assert tool_messages(result)[0].status == "success"
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_list"] == ["lookup-order"]  # one record, under the registered name
    assert len([s for s in eng.steps if s.kind == "steps/toolCallRequest"]) == 1


def test_tool_names_mapping(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("delete_everything", {})), answer("ok")], tool_names={"delete_everything": "lookup-order"}
    )
    result = h.agent.invoke(user_says("x"), config())
    assert tool_messages(result)[0].status == "success"
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_list"] == ["lookup-order"]


def test_modified_text_replaces_the_message(build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    """A guardrail or guardian may hand back other text: the model and the user get that text."""
    monkeypatch.setattr(Engagement, "check_input", lambda self, text: text.replace("4111", "[card]"))
    monkeypatch.setattr(Engagement, "check_output", lambda self, text: text.upper())
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("shipped"), answer("bye")])
    result = h.agent.invoke(user_says("card 4111, order A-1"), config())

    assert h.model.received[0][-1].content == "card [card], order A-1"
    assert h.model.received[1][0].content == "card [card], order A-1"  # still replaced at the next call
    assert result["messages"][-1].content == "SHIPPED"
    h.agent.invoke(user_says("thanks"), config())
    third = h.model.received[2]
    assert [m.content for m in third if isinstance(m, HumanMessage)] == ["card [card], order A-1", "thanks"]
    assert isinstance(third[-2], AIMessage)
    assert third[-2].content == "SHIPPED"


def test_a_rewritten_answer_is_its_new_text_alone(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the checks took out of the text must not stay beside it: a final answer they rewrote loses its
    reasoning block, the provider's extra fields and the logprobs (which list the text's tokens), and keeps
    the model's name and why it stopped (one they passed: tests/test_lc_attacks.py)."""
    monkeypatch.setattr(Engagement, "check_output", lambda self, text: text.replace("4111", "[card]"))
    secret = {"type": "reasoning", "reasoning": "the card is 4111"}
    written = AIMessage(
        content=[secret, {"type": "text", "text": "Your card 4111 is on file."}],
        additional_kwargs={"refusal": "4111", "reasoning_content": "4111"},
        response_metadata={"model_name": "m-1", "finish_reason": "stop", "logprobs": {"content": ["4111"]}},
    )
    h = build_agent([written])
    result = h.agent.invoke(user_says("my card?"), config())
    delivered = result["messages"][-1]
    assert delivered.content == "Your card [card] is on file."
    assert "4111" not in delivered.model_dump_json()
    assert delivered.response_metadata == {"model_name": "m-1", "finish_reason": "stop"}


def test_rejects_a_bad_on_denied() -> None:
    with pytest.raises(ValueError, match="on_denied"):
        AgentGuardMiddleware(make_guard(), on_denied="ignore")  # type: ignore[arg-type]


def test_a_tool_that_raises_propagates_and_is_recorded_as_failed(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("broken", {"reason": "disk full"}))], tool_names={"broken": "lookup-order"})
    with pytest.raises(RuntimeError, match="disk full"):
        h.agent.invoke(user_says("break it"), config())
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.state.calls[-1].status == "failed"
    assert "disk full" in (eng.state.calls[-1].error or "")


def test_guardian_denied_answer_is_replaced_by_a_notice(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def deny(self: Engagement, text: str) -> str:
        raise GuardianDenied("leaks an internal note", reason_code="data-leak")

    monkeypatch.setattr(Engagement, "check_output", deny)
    h = build_agent([answer("internal note: ...")])
    result = h.agent.invoke(user_says("hi"), config())
    final = result["messages"][-1]
    assert isinstance(final, AIMessage)
    assert final.content.startswith("The response was blocked by agentguard")
    assert "internal note:" not in final.content
    assert not final.tool_calls


def test_guardian_denied_answer_raises_with_on_denied_raise(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def deny(self: Engagement, text: str) -> str:
        raise GuardianDenied("no")

    monkeypatch.setattr(Engagement, "check_output", deny)
    h = build_agent([answer("x")], on_denied="raise")
    with pytest.raises(GuardianDenied):
        h.agent.invoke(user_says("hi"), config())


def test_inputs_the_pipeline_rewrote_reach_the_tool(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A guardian ``modify`` hands the tool other inputs; the adapter must pass those on, not the model's."""
    original = Guard.call

    def rewriting_call(self: Guard, name: str, inputs: Any, fn: Any = None, **kw: Any) -> Any:
        return original(self, name, {**inputs, "order_id": "A-2"}, fn, **kw)

    monkeypatch.setattr(Guard, "call", rewriting_call)
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("ok")])
    result = h.agent.invoke(user_says("look"), config())
    assert '"order_id": "A-2"' in tool_messages(result)[0].content


LEAKY_SPEC = """
kind: openagentspec:v1/agent
name: leaky-agent
description: The agent reads files.
intent: You read files.
owner: tests@corp.com
capabilities:
  read-file:
    output_restriction:
      assertion: '!string(recent["read-file"].outputs).contains("SECRET")'
"""


def test_a_tool_error_passes_the_output_restriction_before_the_model_sees_it(build_agent: BuildAgent) -> None:
    from langchain_core.tools import ToolException

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        raise ToolException(f"cannot parse {path}: SECRET-7 on line 1")

    read_file.handle_tool_error = True  # LangChain turns the exception into an error ToolMessage

    guard = Guard.from_yaml(LEAKY_SPEC)
    script = [
        calls(("read_file", {"path": "/etc/app.env"})),
        calls(("read_file", {"path": "/tmp/x"})),
        answer("ok"),
    ]
    h = build_agent(script, guard=guard, extra_tools=[read_file])
    result = h.agent.invoke(user_says("read it"), config())
    first, _ = tool_messages(result)
    assert first.status == "error"
    assert "SECRET-7" not in str(first.content)
    assert "withheld" in str(first.content)
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert "SECRET-7" not in repr([step.decisions for step in eng.steps])


def test_a_python_rule_denial_reaches_the_model_which_recovers(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("that order is private")])
    h.guard.rules.add(
        "no-a1", lambda context: context.inputs.get("order_id") != "A-1", capabilities={"lookup-order"}
    )
    result = h.agent.invoke(user_says("where is A-1?"), config())
    (message,) = tool_messages(result)
    assert message.status == "error"
    assert "no-a1" in str(message.content)
    assert h.shop.runs["lookup_order"] == 0


CRAFTED_SPEC = """
kind: openagentspec:v1/agent
name: search-agent
description: The agent searches.
intent: You search.
owner: tests@corp.com
capabilities:
  crafted-search:
    output_restriction:
      assertion: recent["crafted-search"].outputs.results == []
"""


@pytest.mark.parametrize(
    "text",
    [
        '{"results": ["SECRET-1", "SECRET-2"], "results": []}',
        '{"page": {"results": ["SECRET-1"], "results": []}, "results": []}',
        '{"results": [], "more": [{"results": ["SECRET-1"], "results": []}]}',
        # Nested deeper than the parser recurses (it raised RecursionError out of the tool call): still text.
        "[" * 100_000 + '{"results": ["SECRET-1"]}' + "]" * 100_000,
    ],
    ids=["twice", "twice-nested", "twice-in-a-list", "too-deep"],
)
def test_a_json_text_with_a_key_twice_is_checked_as_the_model_reads_it(
    build_agent: BuildAgent, text: str
) -> None:
    """A parser keeps one value of a repeated key; the model reads the text, both values. Such a text is
    not decoded, nor one nested too deep to parse: the output restriction sees the text itself (and here
    fails on it: a text has no ``results``)."""

    @tool
    def crafted_search(query: str) -> str:
        """Search the web."""
        return text

    h = build_agent(
        [calls(("crafted_search", {"query": "q"})), answer("ok")],
        guard=Guard.from_yaml(CRAFTED_SPEC),
        extra_tools=[crafted_search],
    )
    result = h.agent.invoke(user_says("search"), config())
    (message,) = tool_messages(result)
    assert message.status == "error"
    assert "SECRET-1" not in str(message.content)
    assert "[restriction output] crafted-search" in str(message.content), message.content
    assert all("SECRET-1" not in str(m.content) for batch in h.model.received for m in batch)
