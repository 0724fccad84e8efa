"""The middleware's model calls become GenAI ``chat {model}`` spans in the same trace as the tool calls."""

from __future__ import annotations

import asyncio

from agentguard_langchain.testing import answer, calls
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from integrations.langchain.tests.conftest import BuildAgent, config, make_guard, user_says

SCRIPT = [calls(("lookup_order", {"order_id": "A-1"})), answer("Your order has shipped.")]


def _traced_guard() -> tuple[InMemorySpanExporter, object]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, make_guard(tracer_provider=provider)


def test_model_calls_are_chat_spans_beside_the_tool_spans(build_agent: BuildAgent) -> None:
    exporter, guard = _traced_guard()
    h = build_agent(SCRIPT, guard=guard)
    h.agent.invoke(user_says("Where is A-1?"), config(), context={"user_id": "u-1"})
    spans = exporter.get_finished_spans()  # the run is over, so is its turn: the thread stays open
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(chats) == 2  # one per model call: the tool call, then the answer
    chat = chats[0]
    assert chat.kind is SpanKind.CLIENT
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.conversation.id"] == "t1"
    assert chat.attributes["gen_ai.request.model"] == chat.name.removeprefix("chat ")
    tool = next(s for s in spans if s.name == "execute_tool lookup-order")
    turn = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert {chat.context.trace_id, tool.context.trace_id} == {turn.context.trace_id}
    assert chat.parent is not None
    assert chat.parent.span_id == turn.context.span_id


def test_a_failing_model_call_marks_its_span(build_agent: BuildAgent) -> None:
    exporter, guard = _traced_guard()
    h = build_agent([], guard=guard)  # an empty script: the model raises
    try:
        asyncio.run(h.agent.ainvoke(user_says("hi"), config(), context={"user_id": "u-1"}))
    except Exception as error:
        failure = type(error).__name__
    else:
        raise AssertionError("the scripted model should have failed")
    chat = next(s for s in exporter.get_finished_spans() if s.name.startswith("chat"))
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == failure


def test_each_run_of_a_thread_is_one_turn_span(build_agent: BuildAgent) -> None:
    exporter, guard = _traced_guard()
    h = build_agent([*SCRIPT, *SCRIPT], guard=guard)
    for question in ("Where is A-1?", "And now?"):
        h.agent.invoke(user_says(question), config(), context={"user_id": "u-1"})
        # every span of the run has ended when invoke returns, though the thread's engagement is open
        assert all(s.end_time is not None for s in exporter.get_finished_spans())
    turns = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert len(turns) == 2
    assert turns[0].end_time is not None
    assert turns[1].start_time is not None
    assert turns[0].end_time <= turns[1].start_time
    tools = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup-order"]
    assert [t.parent.span_id for t in tools if t.parent] == [t.context.span_id for t in turns]
    assert h.middleware.engagement_for("t1") is not None
