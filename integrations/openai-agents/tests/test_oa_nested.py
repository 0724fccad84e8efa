"""An agent used as a tool (``Agent.as_tool``) runs in a run of its own, with its own tools: only the call of the
agent tool passes through the outer agent's wrapped tools. The adapter guards the inner agent's calls in the same
engagement when the tool is made of the wrapped agent, and refuses an agent tool made of an unguarded agent at
``wrap`` rather than let the inner agent's tools run unguarded. Real ``Runner`` runs on scripted models."""

from __future__ import annotations

from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard, RunStopped, violation_of
from agentguard_openai_agents.testing import ScriptedModel, answer, calls
from agents import Agent, FunctionTool, OutputGuardrailTripwireTriggered, Runner

from agentguard import GuardrailViolation, Outcome, Rule, ShortCircuitViolation

from .conftest import Shop, make_guard, make_tools, reachable
from .test_oa_beside import LOOKUP
from .test_oa_hosted import MCP


def helper(shop: Shop, script: list[Any], tools: list[Any] | None = None) -> Agent[Any]:
    return Agent(
        name="Helper",
        model=ScriptedModel(script),
        tools=make_tools(shop) if tools is None else tools,
    )


def as_billing(agent: Agent[Any]) -> FunctionTool:
    """The agent as the shop agent's ``billing`` capability."""
    return agent.as_tool(tool_name="billing", tool_description="Billing questions.")


def shop_agent(guarded: AgentGuard, script: list[Any], tools: list[Any]) -> Agent[Any]:
    return guarded.wrap(Agent(name="shop", model=ScriptedModel(script), tools=tools))


@pytest.mark.parametrize(
    "tools",
    [
        pytest.param(None, id="function-tools"),
        pytest.param([MCP], id="hosted-tool"),
        pytest.param([], id="no-tools"),
    ],
)
def test_an_agent_tool_made_of_an_unguarded_agent_is_refused_at_wrap(tools: list[Any] | None) -> None:
    """Unwrapped, the inner agent would run its tools unguarded (``delete_everything`` is no capability), and one
    without tools could be given some later. Refused, naming the tool and the agent, saying what to do."""
    shop = Shop()
    guarded = AgentGuard(make_guard())
    inner = helper(shop, [calls(("delete_everything", {})), answer("Done.")], tools)
    with pytest.raises(ValueError, match=r"'billing' runs agent 'Helper'.*guarded\.wrap\(agent\)\.as_tool"):
        shop_agent(guarded, [calls(("billing", {"input": "help"})), answer("Done.")], [as_billing(inner)])
    assert shop.runs == {}


async def test_the_tools_of_a_wrapped_agent_used_as_a_tool_are_guarded_in_the_same_engagement() -> None:
    shop = Shop()
    guarded = AgentGuard(make_guard())
    inner = guarded.wrap(
        helper(
            shop,
            [
                calls(("delete_everything", {})),
                calls(("send_email", {"to": "eve@evil.test", "body": "hi"})),
                calls(LOOKUP),
                answer("A-1 is paid."),
            ],
        )
    )
    outer = shop_agent(
        guarded, [calls(("billing", {"input": "Is A-1 paid?"})), answer("Paid.")], [as_billing(inner)]
    )
    async with guarded.session() as session:
        result = await Runner.run(outer, "Is A-1 paid?", hooks=guarded.hooks)
    assert result.final_output == "Paid."
    assert shop.runs == {"lookup_order": 1}
    eng = session.engagement
    called = [s.name for s in eng.steps if s.kind == "steps/toolCallRequest"]
    assert called == ["billing", "delete-everything", "send-email", "lookup-order"]
    denied = [(d.capability, d.rule) for d in eng.decisions if d.outcome is Outcome.DENY]
    assert denied == [("delete-everything", Rule.CAPABILITY), ("send-email", Rule.RESTRICTION)]
    assert "A-1 is paid." in str(eng.view()["history"]["billing"][0]["outputs"])


async def test_the_inner_run_is_no_new_user_turn() -> None:
    """The inner run's input is the agent tool call's arguments, checked as that capability's inputs: it is not
    the user's input, so it neither starts a turn nor goes through the user input guardrail again."""
    shop = Shop()
    guarded = AgentGuard(make_guard())
    inner = guarded.wrap(helper(shop, [answer("Paid.")]))
    outer = shop_agent(
        guarded, [calls(("billing", {"input": "Is A-1 paid?"})), answer("Paid.")], [as_billing(inner)]
    )
    async with guarded.session() as session:
        await Runner.run(outer, "Is A-1 paid?", hooks=guarded.hooks)
    eng = session.engagement
    users = [s for s in eng.steps if s.kind == "steps/message" and s.name == "user"]
    assert len(users) == 1
    assert len({s.turn_id for s in eng.steps}) == 1


async def test_a_loop_in_the_inner_run_stops_the_outer_run() -> None:
    """The loop rule holds in the inner run: the third lookup in a row is stopped, and the whole run ends with the
    stop. (The SDK hands an error of the inner run to the outer model as the agent tool's output and carries on.)"""
    shop = Shop()
    guarded = AgentGuard(make_guard())
    inner = guarded.wrap(helper(shop, [calls(LOOKUP), calls(LOOKUP), calls(LOOKUP), answer("never")]))
    outer = shop_agent(guarded, [calls(("billing", {"input": "A-1?"})), answer("never")], [as_billing(inner)])
    async with guarded.session() as session:
        with pytest.raises(RunStopped) as raised:
            await Runner.run(outer, "Where is A-1?", hooks=guarded.hooks)
    assert isinstance(violation_of(raised.value), ShortCircuitViolation)
    assert shop.runs == {"lookup_order": 2}
    assert session.engagement.status.value == "stopped"


async def test_a_stopped_answer_of_the_inner_agent_stops_the_outer_run() -> None:
    """The inner agent's answer fails the output guardrail: the run ends there with the tripwire, holding no trace
    of the answer, and the outer model is not asked again."""
    shop = Shop()
    guarded = AgentGuard(make_guard())
    inner = guarded.wrap(helper(shop, [answer("A stupid question.")]))
    outer_model = ScriptedModel([calls(("billing", {"input": "A-1?"})), answer("never")])
    outer = guarded.wrap(Agent(name="shop", model=outer_model, tools=[as_billing(inner)]))
    async with guarded.session():
        with pytest.raises(OutputGuardrailTripwireTriggered) as raised:
            await Runner.run(outer, "Is A-1 paid?", hooks=guarded.hooks)
    assert isinstance(violation_of(raised.value), GuardrailViolation)
    assert reachable(raised.value, "stupid") == []
    assert len(outer_model.calls) == 1
