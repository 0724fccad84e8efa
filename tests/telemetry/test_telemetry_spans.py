"""The span tree of a guarded engagement: names, kinds, parentage and GenAI attributes."""

from __future__ import annotations

import asyncio
import threading

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from agentguard import ShortCircuitViolation, User, steps
from tests.conftest import spec_text
from tests.telemetry.conftest import Otel, is_child

SPEC = spec_text(
    """
    capabilities:
      lookup: {}
      summarize: {}
      research: {}
    lifespan:
      short_circuit: 3
    """
)


def test_an_engagement_is_a_turn_span_with_a_span_per_step(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    tool_tracer = otel.tracer_provider.get_tracer("the-tool")

    @guard.tool
    def lookup(order_id: str) -> dict[str, str]:
        with tool_tracer.start_as_current_span("database query"):
            return {"status": "shipped"}

    @guard.tool
    def summarize(text: str) -> str:
        return lookup(order_id=text)["status"]  # a guarded tool calling another one

    with guard.engagement(user=User(id="u1"), engagement_id="eng-1") as eng:
        eng.check_input("where is my order?")
        lookup(order_id="A-1")
        summarize(text="A-2")
        eng.report_knowledge_retrieval("refunds", [{"id": "kb-1", "content": "..."}])

    turn = otel.span("invoke_agent test-agent")
    assert turn.kind is SpanKind.INTERNAL
    assert turn.parent is None
    assert dict(turn.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "test-agent",
        "gen_ai.agent.id": "test-agent",
        "gen_ai.conversation.id": "eng-1",
        "agentguard.turn.id": eng.steps[0].turn_id,
        "agentguard.engagement.status": "active",
    }
    first, inner = otel.named("execute_tool lookup")
    outer = otel.span("execute_tool summarize")
    query = otel.named("database query")
    message = otel.span("apply_guardrail llm_input")
    knowledge = otel.span("apply_guardrail knowledge_result")
    assert is_child(first, turn)
    assert is_child(outer, turn)
    assert is_child(inner, outer), "a guarded call inside a tool nests in that tool's span"
    assert all(any(is_child(q, t) for t in (first, inner)) for q in query), "the tool's own spans nest"
    assert is_child(message, turn)
    assert is_child(knowledge, turn)
    assert {s.context.trace_id for s in otel.spans() if s.context} == {turn.context.trace_id}

    step = eng.steps[1]
    assert step.kind == "steps/toolCallRequest"
    assert step.name == "lookup"
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": step.call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.agent.name": "test-agent",
        "gen_ai.agent.id": "test-agent",
        "gen_ai.conversation.id": "eng-1",
        "agentguard.step.kind": "steps/toolCallRequest",
        "agentguard.step.id": step.step_id,
        "agentguard.outcome": "allow",
    }
    assert first.status.status_code is StatusCode.UNSET
    assert message.attributes is not None
    assert knowledge.attributes is not None
    assert message.attributes["gen_ai.operation.name"] == "apply_guardrail"
    assert message.attributes["gen_ai.security.target.type"] == "llm_input"
    assert message.attributes["gen_ai.security.decision.type"] == "allow"
    assert knowledge.attributes["agentguard.step.kind"] == "steps/knowledgeRetrieval"
    assert trace.get_current_span() is trace.INVALID_SPAN, "every span was detached again"


def test_other_steps_are_named_by_what_is_judged(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    with guard.engagement() as eng:
        eng.report(steps.Message("agent", "Your order shipped."))
        eng.report(steps.Message("system", "You are helpful."))
        eng.report(steps.MemoryStore(memory=["likes tea"]))
        eng.report(steps.MemoryContextRetrieval(memory=["likes tea"]))
        eng.report(steps.AgentTrigger(event_type="email", event_id="m-1", text="hi"))
        eng.report(steps.MCP(message={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        eng.report(steps.A2A("message/send", {"jsonrpc": "2.0", "id": 1, "method": "message/send"}))
    names = sorted(s.name for s in otel.spans() if s.name.startswith("apply_guardrail"))
    assert names == [
        "apply_guardrail a2a_message",
        "apply_guardrail agent_trigger",
        "apply_guardrail llm_output",
        "apply_guardrail mcp_message",
        "apply_guardrail memory_retrieve",
        "apply_guardrail memory_store",
        "apply_guardrail message",
    ]


async def test_async_tools_run_inside_their_own_step_span(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    tool_tracer = otel.tracer_provider.get_tracer("the-tool")

    @guard.tool
    async def lookup(order_id: str) -> str:
        with tool_tracer.start_as_current_span(f"fetch {order_id}"):
            await asyncio.sleep(0.01)  # both calls are in flight at once
        return order_id

    async with guard.engagement():
        assert list(await asyncio.gather(lookup(order_id="A"), lookup(order_id="B"))) == ["A", "B"]
        sync_result = guard.call("summarize", {"text": "x"}, lambda text: text.upper())
    assert sync_result == "X"
    steps_ = {s.context.span_id: s for s in otel.named("execute_tool lookup") if s.context}
    for order in ("A", "B"):
        fetch = otel.span(f"fetch {order}")
        assert fetch.parent is not None
        step = steps_[fetch.parent.span_id]
        assert step.attributes is not None
        assert step.attributes["agentguard.outcome"] == "allow"
    turn = otel.span("invoke_agent test-agent")
    assert all(is_child(s, turn) for s in otel.named("execute_tool lookup"))
    assert is_child(otel.span("execute_tool summarize"), turn)


def test_each_turn_has_its_own_span(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    lookup = guard.tool(name="lookup")(lambda: "x")
    with guard.engagement() as eng:
        lookup()
        eng.new_turn()
        lookup()
    first_turn, second_turn = sorted(otel.named("invoke_agent test-agent"), key=lambda s: s.start_time or 0)
    first_step, second_step = sorted(otel.named("execute_tool lookup"), key=lambda s: s.start_time or 0)
    assert is_child(first_step, first_turn)
    assert is_child(second_step, second_turn)
    assert first_turn.attributes is not None
    assert second_turn.attributes is not None
    assert first_turn.attributes["agentguard.turn.id"] != second_turn.attributes["agentguard.turn.id"]


def test_a_step_in_another_thread_still_belongs_to_its_turn(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    lookup = guard.tool(name="lookup")(lambda: "x")
    with guard.engagement() as eng:

        def worker() -> None:  # a plain thread: the turn span is not current here
            with eng.activate():
                lookup()

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert is_child(otel.span("execute_tool lookup"), otel.span("invoke_agent test-agent"))


def test_a_sub_agent_call_is_an_agent_tool(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    research = guard.agent(name="research")(lambda topic: f"notes on {topic}")
    with guard.engagement():
        research(topic="tea")
    attributes = otel.span("execute_tool research").attributes
    assert attributes is not None
    assert attributes["gen_ai.tool.type"] == "agent"


def test_a_stopped_engagement_ends_its_turn_in_error(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    lookup = guard.tool(name="lookup")(lambda: "x")
    with guard.engagement():
        lookup()
        lookup()
        with pytest.raises(ShortCircuitViolation):
            lookup()
    turn = otel.span("invoke_agent test-agent")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.attributes is not None
    assert turn.attributes["error.type"] == "ShortCircuitViolation"
    assert turn.attributes["agentguard.engagement.status"] == "stopped"


def test_a_host_span_around_the_engagement_is_the_turn_parent(otel: Otel) -> None:
    guard = otel.guard(SPEC)
    lookup = guard.tool(name="lookup")(lambda: "x")
    host = otel.tracer_provider.get_tracer("host")
    with host.start_as_current_span("POST /chat"), guard.engagement():
        lookup()
    request = otel.span("POST /chat")
    turn = otel.span("invoke_agent test-agent")
    assert is_child(turn, request)
    assert is_child(otel.span("execute_tool lookup"), turn)


def test_calls_without_a_turn_nest_where_they_are_called(otel: Otel) -> None:
    guard = otel.guard(SPEC, auto_engagement=True)  # a one-call engagement has no turn
    lookup = guard.tool(name="lookup")(lambda: "x")
    with otel.tracer_provider.get_tracer("host").start_as_current_span("job"):
        lookup()
    assert is_child(otel.span("execute_tool lookup"), otel.span("job"))
    assert otel.named("invoke_agent test-agent") == []
