"""Engagements per SDK session across turns, ``retain_memory: false``, concurrent sessions, handoffs and
agents-as-tools as agent capabilities, the real reference guardian, and the same decisions as plain Python."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard, RunStopped, violation_of
from agentguard_openai_agents.testing import ScriptedModel, answer, calls
from agents import Agent, InputGuardrailTripwireTriggered, Runner, SQLiteSession

from agentguard import CapabilityDenied, Guard, Outcome, PolicyViolation, RestrictionViolation, Rule, User
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer

from .conftest import BuildAgent, make_guard


async def test_one_engagement_per_session_across_turns(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("lookup_order", {"order_id": "A-1"})), answer("Shipped."), answer("You asked about A-1.")]
    )
    sdk_session = SQLiteSession("conv-1")
    for text in ("Where is A-1?", "What did I ask?"):
        async with h.guarded.session(sdk_session, user=User(id="u1")) as session:
            await Runner.run(h.agent, text, session=session, hooks=h.guarded.hooks)
    eng = h.guarded.engagement_for("conv-1")
    assert eng is session.engagement
    assert eng.user == User(id="u1")
    assert eng.state.names == ["lookup-order"]
    assert "Where is A-1?" in str(h.model.calls[-1].input)  # the session's memory reached the model


async def test_retain_memory_false_gives_each_run_a_fresh_engagement_and_no_memory(
    build_agent: BuildAgent,
) -> None:
    h = build_agent([answer("Hi."), answer("Hello again.")], retain=False)
    sdk_session = SQLiteSession("conv-2")
    engagements = []
    for text in ("My name is Ann", "What is my name?"):
        async with h.guarded.session(sdk_session) as session:
            await Runner.run(h.agent, text, session=session)
            engagements.append(session.engagement)
    assert engagements[0] is not engagements[1]
    assert engagements[0].status.value == "closed"
    assert "Ann" not in str(h.model.calls[-1].input)
    assert len(await sdk_session.get_items()) == 4  # the SDK session itself keeps everything


async def test_retain_memory_false_pops_only_the_blocks_own_items(build_agent: BuildAgent) -> None:
    """Without memory a block's session shows only what was added in it; ``pop_item`` (the README's way to remove
    an input the guardrail stopped) took the real session's last item even when the block had none: an earlier
    run's, hidden from this one, was deleted."""
    h = build_agent([answer("Hi.")], retain=False)
    sdk_session = SQLiteSession("conv-pop")
    async with h.guarded.session(sdk_session) as session:
        await Runner.run(h.agent, "My name is Ann", session=session)
    earlier = await sdk_session.get_items()
    async with h.guarded.session(sdk_session) as session:
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items([{"role": "user", "content": "Mine"}])
        assert await session.pop_item() == {"role": "user", "content": "Mine"}
        assert await session.pop_item() is None
    assert await sdk_session.get_items() == earlier


async def test_retain_memory_false_clears_only_the_blocks_own_items(build_agent: BuildAgent) -> None:
    """``clear_session`` of a block that shows nothing emptied the real session, earlier runs included."""
    h = build_agent([answer("Hi.")], retain=False)
    sdk_session = SQLiteSession("conv-clear")
    async with h.guarded.session(sdk_session) as session:
        await Runner.run(h.agent, "My name is Ann", session=session)
    earlier = await sdk_session.get_items()
    async with h.guarded.session(sdk_session) as session:
        await session.add_items([{"role": "user", "content": "Mine"}])
        await session.clear_session()
        assert await session.get_items() == []
    assert await sdk_session.get_items() == earlier


async def test_retain_memory_false_pops_no_other_blocks_item(build_agent: BuildAgent) -> None:
    """Two blocks over one SDK session (two requests of one conversation at once): A's pop took B's item."""
    h = build_agent([answer("Hi.")], retain=False)
    sdk_session = SQLiteSession("conv-two")
    a, b = h.guarded.session(sdk_session), h.guarded.session(sdk_session)
    async with a, b:
        await a.add_items([{"role": "user", "content": "A's"}])
        await b.add_items([{"role": "user", "content": "B's"}])
        assert await a.pop_item() == {"role": "user", "content": "A's"}
        assert await b.pop_item() == {"role": "user", "content": "B's"}
    assert await sdk_session.get_items() == [{"role": "user", "content": "A's"}]  # under B's: left in place


async def test_concurrent_sessions_keep_separate_engagements(shop_guard: Any) -> None:
    guard: Guard = shop_guard()
    guarded = AgentGuard(guard)

    async def converse(order: str) -> Any:
        from agents import function_tool

        @function_tool
        async def lookup_order(order_id: str) -> dict[str, str]:
            """Look an order up."""
            await asyncio.sleep(0.01)  # let the other session run in between
            return {"order_id": order_id}

        model = ScriptedModel(
            [calls(("lookup_order", {"order_id": order})) for _ in range(2)] + [answer(order)]
        )
        agent = guarded.wrap(Agent(name="shop", model=model, tools=[lookup_order]))
        async with guarded.session(SQLiteSession(f"c-{order}")) as session:
            await Runner.run(agent, f"Where is {order}?", session=session)
            return session.engagement

    first, second = await asyncio.gather(converse("A-1"), converse("B-2"))
    assert first is not second
    # two lookups each: three in one engagement would have been a loop (short_circuit: 3)
    assert first.state.names == second.state.names == ["lookup-order", "lookup-order"]


async def test_handoffs_and_agents_as_tools_are_agent_capabilities(shop_guard: Any) -> None:
    guard: Guard = shop_guard()
    guarded = AgentGuard(guard)
    billing = Agent(name="Billing", model=ScriptedModel([answer("Billing here.")]))
    helper = Agent(name="Helper", model=ScriptedModel([answer("helped")]))
    triage_model = ScriptedModel([calls(("run_helper", {"input": "x"})), calls(("transfer_to_billing", {}))])
    triage = guarded.wrap(
        Agent(
            name="triage",
            model=triage_model,
            tools=[guarded.wrap(helper).as_tool(tool_name="run_helper", tool_description="a helper agent")],
            handoffs=[billing],
        )
    )
    async with guarded.session() as session:
        result = await Runner.run(triage, "I need billing")
    assert result.final_output == "Billing here."
    called = {s.name for s in session.engagement.steps if s.kind == "steps/toolCallRequest"}
    assert called == {"run-helper", "billing"}
    denied = [
        d for d in session.engagement.decisions if d.rule is Rule.CAPABILITY and d.outcome is Outcome.DENY
    ]
    assert [d.capability for d in denied] == ["run-helper"]  # not in the spec: the model got an error instead


async def test_a_denied_handoff_ends_the_run(shop_guard: Any) -> None:
    guarded = AgentGuard(shop_guard())
    rogue = Agent(name="Rogue", model=ScriptedModel([answer("never")]))
    triage = guarded.wrap(
        Agent(name="triage", model=ScriptedModel([calls(("transfer_to_rogue", {}))]), handoffs=[rogue])
    )
    async with guarded.session():
        with pytest.raises(RunStopped) as raised:
            await Runner.run(triage, "Go rogue")
    assert isinstance(raised.value.violation, CapabilityDenied)


def test_guardian_deny_reaches_the_model_and_modify_reaches_the_tool(
    build_agent: BuildAgent, guardian: RunningServer
) -> None:
    h = build_agent(
        [
            calls(("lookup_order", {"order_id": "X-9"})),
            calls(("send_email", {"to": "bob@corp.com", "body": "card 4000"})),
            answer("Done."),
        ],
        guard=make_guard(guardian=GuardianClient(guardian.url)),
    )
    with h.guard.engagement(user=User(id="u1")) as eng:
        result = Runner.run_sync(h.agent, "Look up X-9 and email Bob", hooks=h.guarded.hooks)
    denied, sent = h.tool_outputs(result)
    assert "another tenant" in denied
    assert h.shop.args == [("send_email", {"to": "bob@corp.com", "body": "[redacted]"})]
    assert sent == "sent to bob@corp.com"
    assert eng.view()["history"]["send-email"][0]["inputs"]["body"] == "[redacted]"


SCENARIO: list[tuple[str, str, dict[str, Any]]] = [
    ("lookup_order", "lookup-order", {"order_id": "A-1"}),
    ("send_email", "send-email", {"to": "eve@evil.test", "body": "x"}),
    ("send_email", "send-email", {"to": "bob@corp.com", "body": "x"}),
    ("delete_everything", "delete-everything", {}),
    ("web_search", "web-search", {"query": "many"}),
    ("lookup_order", "lookup-order", {"order_id": "A-2"}),
]


def _decisions(eng: Any) -> list[tuple[str | None, str, str]]:
    return [
        (s.name, d.rule.value, d.outcome.value)
        for s in eng.steps
        if s.kind == "steps/toolCallRequest"
        for d in s.decisions
    ]


def test_shared_scenario_same_decisions_as_plain_python(build_agent: BuildAgent) -> None:
    h = build_agent([*(calls((sdk, args)) for sdk, _, args in SCENARIO), answer("done")])
    with h.guard.engagement() as through_sdk:
        Runner.run_sync(h.agent, "Go")

    plain = make_guard(reviewers={"supervisor": lambda r: True, "auditor": lambda r: True})  # not asked here
    tools = {
        "lookup-order": lambda order_id: {"order_id": order_id, "status": "shipped"},
        "send-email": lambda to, body: f"sent to {to}",
        "delete-everything": lambda: "deleted",
        "web-search": lambda query: {"results": [f"SECRET-{query}-{i}" for i in range(5)]},
    }
    with plain.engagement() as direct:
        for _, name, args in SCENARIO:
            with contextlib.suppress(RestrictionViolation, CapabilityDenied):
                plain.call(name, args, tools[name])
    assert _decisions(through_sdk) == _decisions(direct)
    assert through_sdk.view()["history"] == direct.view()["history"]


@pytest.mark.parametrize("mode", ["loop", "input"])
async def test_a_stopped_session_stays_stopped_on_its_next_run(build_agent: BuildAgent, mode: str) -> None:
    """A model that trips the loop rule (or a user whose input fails the guardrail) must not get a clean record
    on the session's next run: the record is what history-based restrictions and the loop rule read."""
    loop = [calls(("lookup_order", {"order_id": "A-1"})) for _ in range(3)]
    h = build_agent([*loop, calls(("lookup_order", {"order_id": "A-1"})), answer("Looked again.")])
    sdk_session = SQLiteSession("conv-stopped")
    first = "Loop" if mode == "loop" else "My card is 4111 1111 1111 1111"
    async with h.guarded.session(sdk_session, user=User(id="u1")) as session:
        with pytest.raises((RunStopped, InputGuardrailTripwireTriggered)):
            await Runner.run(h.agent, first, session=session, hooks=h.guarded.hooks)
    stopped = session.engagement
    runs = h.shop.runs["lookup_order"]
    async with h.guarded.session(sdk_session, user=User(id="u1")) as session:
        with pytest.raises((PolicyViolation, InputGuardrailTripwireTriggered)) as raised:
            await Runner.run(h.agent, "Look A-1 up", session=session, hooks=h.guarded.hooks)
    assert session.engagement is stopped
    assert violation_of(raised.value) is not None
    assert h.shop.runs["lookup_order"] == runs


async def test_a_closed_session_engagement_gives_way_to_a_fresh_one(build_agent: BuildAgent) -> None:
    h = build_agent([answer("Hi."), answer("Hello again.")])
    sdk_session = SQLiteSession("conv-closed")
    async with h.guarded.session(sdk_session) as session:
        await Runner.run(h.agent, "Hi", session=session)
    first = session.engagement
    first.close()  # the app ends it on purpose
    async with h.guarded.session(sdk_session) as session:
        await Runner.run(h.agent, "Hi again", session=session)
    assert session.engagement is not first
    assert session.engagement.status.value == "active"
