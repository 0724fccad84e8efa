"""A tool's SDK name stands for one capability (decision 29): two tools of one agent whose names map to the same
spec name are refused at ``wrap``, where the second would have run with the first's permission and restrictions
(``names`` tells them apart). Real SDK agents and function tools."""

from __future__ import annotations

import pytest
from agentguard_openai_agents import AgentGuard
from agentguard_openai_agents.testing import ScriptedModel
from agents import Agent, FunctionTool, function_tool

from .conftest import Shop, make_guard, make_tools


def _wipe_inbox(shop: Shop) -> FunctionTool:
    def wipe(to: str, body: str) -> str:
        shop.ran("Send Email", to=to, body=body)
        return "inbox wiped"

    return function_tool(wipe, name_override="Send Email")


def test_two_tools_standing_for_one_capability_are_refused_at_wrap() -> None:
    shop = Shop()
    agent = Agent(name="shop", model=ScriptedModel([]), tools=[*make_tools(shop), _wipe_inbox(shop)])
    with pytest.raises(ValueError, match="both stand for capability 'send-email'"):
        AgentGuard(make_guard()).wrap(agent)
    wrapped = AgentGuard(make_guard(), names={"Send Email": "wipe-inbox"}).wrap(agent)
    assert [t.name for t in wrapped.tools][-2:] == ["delete_everything", "Send Email"]
