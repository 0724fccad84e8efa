"""``ainvoke`` / ``astream`` paths, parallel tool calls, and concurrent threads with isolated engagements."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest
from agentguard_langchain import AgentGuardMiddleware
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command
from langsmith import tracing_context

from agentguard import GuardrailViolation, ShortCircuitViolation
from integrations.langchain.tests.conftest import BuildAgent, config, make_guard, user_says


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


async def test_ainvoke_allowed_and_denied(build_agent: BuildAgent) -> None:
    h = build_agent(
        [
            calls(("lookup_order", {"order_id": "A-1"})),
            calls(("send_email", {"to": "eve@evil.test", "body": "x"})),
            answer("done"),
        ]
    )
    result = await h.agent.ainvoke(user_says("go"), config(), context={"user_id": "u-1"})
    assert [m.status for m in tool_messages(result)] == ["success", "error"]
    assert h.shop.runs == {"lookup_order": 1}
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.user is not None
    assert eng.user.id == "u-1"
    assert eng.view()["history"]["_list"] == ["lookup-order"]


async def test_ainvoke_output_withheld_and_guardrails(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("web_search", {"query": "many"})), answer("stupid")])
    with pytest.raises(GuardrailViolation):
        await h.agent.ainvoke(user_says("search"), config())
    batch = h.model.received[1]
    (message,) = [m for m in batch if isinstance(m, ToolMessage)]
    assert message.status == "error"
    assert "SECRET" not in message.content


async def test_ainvoke_short_circuit(build_agent: BuildAgent) -> None:
    a = calls(("lookup_order", {"order_id": "A-1"}))
    h = build_agent(
        [a, calls(("lookup_order", {"order_id": "A-1"})), calls(("lookup_order", {"order_id": "A-1"}))]
    )
    with pytest.raises(ShortCircuitViolation):
        await h.agent.ainvoke(user_says("loop"), config())
    assert h.shop.runs["lookup_order"] == 2


async def test_astream_yields_guarded_updates(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("send_email", {"to": "eve@evil.test", "body": "x"})), answer("Sorry, I cannot email eve.")]
    )
    updates: list[dict[str, Any]] = []
    async for chunk in h.agent.astream(user_says("mail eve"), config(), stream_mode="updates"):
        updates.append(chunk)
    streamed: list[BaseMessage] = [
        m
        for chunk in updates
        for node in chunk.values()
        if isinstance(node, dict)
        for m in node.get("messages", [])
    ]
    errors = [m for m in streamed if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(errors) == 1
    assert "[restriction input] send-email" in errors[0].content
    assert isinstance(streamed[-1], AIMessage)
    assert streamed[-1].content == "Sorry, I cannot email eve."
    assert h.shop.runs["send_email"] == 0


async def test_async_review_resume_runs_the_tool_once(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("wire_money", {"to": "ACME", "amount": 5})), answer("wired")])
    first = await h.agent.ainvoke(user_says("wire"), config())
    assert first["__interrupt__"][0].value["agentguard"]["phase"] == "input"
    middle = await h.agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert middle["__interrupt__"][0].value["agentguard"]["phase"] == "output"
    done = await h.agent.ainvoke(
        Command(resume={"decisions": [{"type": "reject", "message": "no"}]}), config()
    )
    assert h.shop.runs["wire_money"] == 1
    (message,) = tool_messages(done)
    assert message.status == "error"
    assert "W-1" not in message.content


async def test_astream_review_interrupt_and_resume(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("export_data", {"table": "t"})), answer("exported")])
    interrupts = [
        c
        async for c in h.agent.astream(user_says("export"), config(), stream_mode="updates")
        if "__interrupt__" in c
    ]
    assert len(interrupts) == 1
    chunks = [c async for c in h.agent.astream(Command(resume="approve"), config(), stream_mode="values")]
    assert chunks[-1]["messages"][-1].content == "exported"
    assert h.shop.runs["export_data"] == 1


def test_parallel_tool_calls_in_one_message(build_agent: BuildAgent) -> None:
    """LangGraph runs them in worker threads: each binds the engagement in its own context."""
    h = build_agent(
        [
            calls(
                ("lookup_order", {"order_id": "A-1"}),
                ("send_email", {"to": "eve@evil.test", "body": "x"}),
                ("lookup_order", {"order_id": "A-2"}),
                ("web_search", {"query": "one"}),
            ),
            answer("done"),
        ]
    )
    result = h.agent.invoke(user_says("all at once"), config())
    statuses = sorted(m.status for m in tool_messages(result))
    assert statuses == ["error", "success", "success", "success"]
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert sorted(eng.view()["history"]["_list"]) == ["lookup-order", "lookup-order", "web-search"]


async def test_parallel_tool_calls_async(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("lookup_order", {"order_id": "A-1"}), ("lookup_order", {"order_id": "A-2"})), answer("done")]
    )
    result = await h.agent.ainvoke(user_says("both"), config())
    assert [m.status for m in tool_messages(result)] == ["success", "success"]


def _per_thread_script(messages: list[BaseMessage]) -> AIMessage:
    """Each conversation calls lookup_order for its own order twice, then answers."""
    order = str(messages[0].content).split()[-1]
    done = sum(isinstance(m, ToolMessage) for m in messages)
    if done < 2:
        return calls(("lookup_order", {"order_id": f"{order}-{done}"}))
    return answer(f"{order} checked")


def test_two_threads_run_concurrently_with_isolated_engagements(build_agent: BuildAgent) -> None:
    h = build_agent([], then=_per_thread_script)
    results: dict[str, Any] = {}
    barrier = threading.Barrier(2)

    def run(thread: str, order: str) -> None:
        barrier.wait()
        results[thread] = h.agent.invoke(
            user_says(f"check {order}"), config(thread), context={"user_id": thread}
        )

    workers = [threading.Thread(target=run, args=(f"t-{o}", o)) for o in ("A", "B")]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    for order in ("A", "B"):
        eng = h.middleware.engagement_for(f"t-{order}")
        assert eng is not None
        assert eng.id == f"t-{order}"
        assert eng.user is not None
        assert eng.user.id == f"t-{order}"
        inputs = [c["inputs"]["order_id"] for c in eng.view()["history"]["lookup-order"]]
        assert inputs == [f"{order}-0", f"{order}-1"]
        assert results[f"t-{order}"]["messages"][-1].content == f"{order} checked"


async def test_two_threads_concurrently_async(build_agent: BuildAgent) -> None:
    h = build_agent([], then=_per_thread_script)
    a, b = await asyncio.gather(
        h.agent.ainvoke(user_says("check A"), config("ta")),
        h.agent.ainvoke(user_says("check B"), config("tb")),
    )
    assert a["messages"][-1].content == "A checked"
    assert b["messages"][-1].content == "B checked"
    for thread, order in (("ta", "A"), ("tb", "B")):
        eng = h.middleware.engagement_for(thread)
        assert eng is not None
        assert [c["inputs"]["order_id"] for c in eng.view()["history"]["lookup-order"]] == [
            f"{order}-0",
            f"{order}-1",
        ]


async def test_async_guard_tool_wrapped_by_langchain_tool_is_checked_once(build_agent: BuildAgent) -> None:
    guard = make_guard()
    runs: list[str] = []

    @tool
    @guard.tool(name="lookup-order")
    async def lookup(order_id: str) -> dict[str, str]:
        """Look an order up (async, guarded by the decorator too)."""
        runs.append(order_id)
        return {"order_id": order_id}

    h = build_agent([calls(("lookup", {"order_id": "A-9"})), answer("ok")], guard=guard, extra_tools=[lookup])
    result = await h.agent.ainvoke(user_says("look"), config())
    assert runs == ["A-9"]
    assert tool_messages(result)[0].status == "success"
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_list"] == ["lookup-order"]


async def test_a_scripted_model_with_latency_lets_the_event_loop_run() -> None:
    model = ScriptedChatModel(script=[answer("late")], latency_ms=50)
    events: list[str] = []

    async def ask() -> None:
        reply = await model.ainvoke("hi")
        events.append(f"model: {reply.content}")

    async def meanwhile() -> None:
        await asyncio.sleep(0)
        events.append("the loop ran")

    await asyncio.gather(ask(), meanwhile())
    assert events == ["the loop ran", "model: late"]
    model.reset([answer("sync")])
    assert model.invoke("hi").content == "sync"


async def test_async_hooks_take_langsmiths_cheap_path_only_when_tracing_is_off(
    build_agent: BuildAgent,
) -> None:
    quiet = AgentGuardMiddleware(make_guard())
    # create_agent wraps what it finds on the instance: plain functions (LangSmith's sync wrapper, no thread
    # hops) that still return the hooks' coroutines
    assert not inspect.iscoroutinefunction(quiet.awrap_tool_call)
    assert not inspect.iscoroutinefunction(quiet.awrap_model_call)
    assert not hasattr(quiet.awrap_tool_call, "__wrapped__")

    with tracing_context(enabled=True):  # built while LangSmith traces: the real hooks, nested runs
        traced = AgentGuardMiddleware(make_guard())
    assert inspect.iscoroutinefunction(traced.awrap_tool_call)
    assert inspect.iscoroutinefunction(traced.awrap_model_call)

    # the cheap path guards as the real hooks do
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("done")])
    assert not inspect.iscoroutinefunction(h.middleware.awrap_tool_call)
    result = await h.agent.ainvoke(user_says("look"), config())
    assert tool_messages(result)[0].status == "success"
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_list"] == ["lookup-order"]
