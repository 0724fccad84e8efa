"""A reviewed tool's call runs where the SDK would run it. The SDK asks ``needs_approval`` before it starts the
tool's invocation (its ``on_tool_start`` hooks, its timeout), so a call the adapter ran in ``needs_approval`` ran
before an app's hook could veto it and with no timeout at all. Real ``Runner`` runs on a scripted model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard
from agentguard_openai_agents.testing import ScriptedModel, answer, calls
from agents import (
    Agent,
    AgentsException,
    FunctionTool,
    RunContextWrapper,
    RunHooks,
    Runner,
    SQLiteSession,
    function_tool,
)
from agents.testing import function_call

from agentguard import Approval, User

from .conftest import Shop, make_guard, make_tools


class Veto(AgentsException):
    """The app's own refusal of a tool call, raised from its ``on_tool_start`` hook."""


class VetoHooks(RunHooks[Any]):
    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Any) -> None:
        raise Veto(f"tools are switched off ({tool.name})")


def _approve(request: Any) -> Approval:
    return Approval(True, "fine")


async def test_an_app_hook_that_vetoes_a_call_reviewed_on_the_guard_stops_it_before_it_runs() -> None:
    """``supervisor`` answers on the Guard: no pause, so the call needs no ``needs_approval`` run at all."""
    shop = Shop()
    guarded = AgentGuard(make_guard(reviewers={"supervisor": _approve}))
    model = ScriptedModel([calls(("refund", {"order_id": "A-1", "amount": 40})), answer("Refunded.")])
    agent = guarded.wrap(Agent(name="shop", model=model, tools=make_tools(shop)))
    async with guarded.session(user=User(id="u1")) as session:
        with pytest.raises(Veto):
            await Runner.run(agent, "Refund A-1", hooks=VetoHooks())
    assert shop.runs["refund"] == 0
    assert session.engagement.state.names == []


def _slow(shop: Shop, name: str) -> FunctionTool:
    """A tool of spec capability ``name`` (``wire-money``, ``export-data``) that takes far longer than its timeout."""

    async def slow(to: str) -> str:
        shop.ran(name, to=to)
        await asyncio.sleep(3)
        return "finished late"

    return function_tool(slow, name_override=name.replace("-", "_"), timeout=0.05)


async def _tool_outputs(agent: Agent[Any], guarded: AgentGuard) -> list[str]:
    async with guarded.session(user=User(id="u1")):
        result = await Runner.run(agent, "Go", hooks=guarded.hooks)
        for item in result.interruptions:  # an output review pauses the run: approve what it holds
            state = result.to_state()
            state.approve(item)
            result = await Runner.run(agent, state, hooks=guarded.hooks)
    return [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]


async def test_a_call_reviewed_on_the_guard_runs_under_the_tools_timeout() -> None:
    shop = Shop()
    guarded = AgentGuard(make_guard(reviewers={"supervisor": _approve, "auditor": _approve}))
    model = ScriptedModel([calls(("wire_money", {"to": "bob"})), answer("Done.")])
    agent = guarded.wrap(Agent(name="shop", model=model, tools=[_slow(shop, "wire-money")]))
    outputs = await _tool_outputs(agent, guarded)
    assert shop.runs["wire-money"] == 1
    assert outputs == ["Tool 'wire_money' timed out after 0.05 seconds."]


async def test_a_call_run_for_its_sdk_output_review_runs_under_the_tools_timeout() -> None:
    """``auditor`` is answered through the SDK: the call runs in ``needs_approval`` (its result must be held
    before the run pauses), still under its own timeout."""
    shop = Shop()
    guarded = AgentGuard(make_guard())
    model = ScriptedModel([calls(("export_data", {"to": "bob"})), answer("Done.")])
    agent = guarded.wrap(Agent(name="shop", model=model, tools=[_slow(shop, "export-data")]))
    outputs = await _tool_outputs(agent, guarded)
    assert shop.runs["export-data"] == 1
    assert outputs == ["Tool 'export_data' timed out after 0.05 seconds."]


async def test_paused_calls_of_the_same_id_in_two_sessions_are_each_their_own() -> None:
    """Some providers number calls (``call_0``) in every conversation: two users' output-reviewed calls then share
    an id. Each approval hands over its own held result; one user's approval or rejection settles nobody else's."""
    shop = Shop()
    guarded = AgentGuard(make_guard())
    agents: dict[str, Agent[Any]] = {}
    for who in ("alice", "bob"):
        script = [[function_call("export_data", {"table": who}, call_id="call_0")], answer(f"Done, {who}.")]
        agents[who] = guarded.wrap(Agent(name="shop", model=ScriptedModel(script), tools=make_tools(shop)))
    paused: dict[str, Any] = {}
    for who, agent in agents.items():
        async with guarded.session(SQLiteSession(who), user=User(id=who)) as session:
            paused[who] = await Runner.run(agent, "Export my data", session=session, hooks=guarded.hooks)
    outputs: dict[str, list[str]] = {}
    for who, agent in agents.items():
        state = paused[who].to_state()
        state.approve(paused[who].interruptions[0])
        async with guarded.session(SQLiteSession(who), user=User(id=who)) as session:
            result = await Runner.run(agent, state, session=session, hooks=guarded.hooks)
        outputs[who] = [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]
    assert shop.runs["export_data"] == 2
    assert outputs == {
        "alice": [str({"rows": ["alice-row-1", "alice-row-2"]})],
        "bob": [str({"rows": ["bob-row-1", "bob-row-2"]})],
    }


async def _paused_refund(guarded: AgentGuard, shop: Shop, who: str) -> tuple[Agent[Any], Any]:
    """``who``'s run of a refund of 40, paused for the supervisor's approval through the SDK."""
    model = ScriptedModel([calls(("refund", {"order_id": "A-1", "amount": 40})), answer("Refunded.")])
    agent = guarded.wrap(Agent(name="shop", model=model, tools=make_tools(shop)))
    async with guarded.session(SQLiteSession(who), user=User(id=who)) as session:
        result = await Runner.run(agent, "Refund A-1", session=session, hooks=guarded.hooks)
    assert [i.tool_name for i in result.interruptions] == ["refund"]
    return agent, result


async def test_an_approval_carried_into_another_users_session_runs_nothing() -> None:
    """The SDK's approvals live in the run state, which an app may store and hand back anywhere: resumed in Bob's
    session, Alice's approved call is not one Bob's engagement paused."""
    shop = Shop()
    guarded = AgentGuard(make_guard())
    agent, paused = await _paused_refund(guarded, shop, "alice")
    state = paused.to_state()
    state.approve(paused.interruptions[0])
    async with guarded.session(SQLiteSession("bob"), user=User(id="bob")) as bob:
        result = await Runner.run(agent, state, hooks=guarded.hooks)
    assert shop.runs["refund"] == 0
    assert "did not pause this call" in str(result.new_items[-2].output)
    assert bob.engagement.state.names == []
