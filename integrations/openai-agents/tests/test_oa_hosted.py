"""Hosted tools (``HostedMCPTool``, ``WebSearchTool``, ...) run at the model's provider, which calls them and hands
their results straight to the model within one response: agentguard can check neither the call (it has happened
when the response arrives) nor the result (the model has read it). So a hosted tool within a guarded agent's reach
is refused: at ``wrap``, when a run starts or a model is called with one added since, and when a response shows its
provider ran one (a tool configured elsewhere, e.g. in a stored prompt), before the result reaches anyone. The same
holds for a function tool or handoff added after ``wrap``. Real ``Runner`` runs on scripted models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agentguard_openai_agents import AgentGuard
from agentguard_openai_agents.testing import ModelStep, ScriptedModel, answer, calls
from agents import Agent, FileSearchTool, HostedMCPTool, Runner, WebSearchTool, function_tool
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
)
from openai.types.responses.response_output_item import McpCall

from agentguard import Guard

from .conftest import Shop, make_guard, reachable
from .test_oa_streaming import UNCHECKED, _response
from .test_oa_withheld import MODELS, MODES, run

MCP = HostedMCPTool(
    tool_config={
        "type": "mcp",
        "server_label": "docs",
        "server_url": "https://docs.test/mcp",
        "require_approval": "never",
    }
)


def mcp_call() -> McpCall:
    """A hosted MCP tool's call the provider has run, with its result."""
    return McpCall(
        id="mcp-1",
        type="mcp_call",
        server_label="docs",
        name="search",
        arguments="{}",
        output="SECRET: 3 results",
    )


def streamed(output: list[Any]) -> ModelStep:
    """``output`` as a provider streams it: each item's ``output_item.added`` and ``done``, then the response."""
    response = _response("completed", output)
    started = response.model_copy(update={"output": [], "status": "in_progress"})
    events: list[Any] = [ResponseCreatedEvent(type="response.created", response=started, sequence_number=0)]
    for index, item in enumerate(output):
        where: dict[str, Any] = {"item": item, "output_index": index, "sequence_number": len(events)}
        events.append(ResponseOutputItemAddedEvent(type="response.output_item.added", **where))
        events.append(ResponseOutputItemDoneEvent(type="response.output_item.done", **where))
    events.append(
        ResponseCompletedEvent(type="response.completed", response=response, sequence_number=len(events))
    )
    return ModelStep.stream(events)


@pytest.mark.parametrize(
    "tool",
    [MCP, WebSearchTool(), FileSearchTool(vector_store_ids=["vs-1"])],
    ids=["mcp", "web-search", "file-search"],
)
def test_a_hosted_tool_is_refused_at_wrap(tool: Any) -> None:
    """Not a gap: ``wrap`` has always refused them. Kept, so that it stays so."""
    with pytest.raises(ValueError, match=r"runs outside this process.* cannot be guarded"):
        AgentGuard(make_guard()).wrap(Agent(name="searcher", model=ScriptedModel([]), tools=[tool]))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("change", ["appended", "cloned"])
@pytest.mark.parametrize("mode", ["run", "streamed"])
def test_a_hosted_tool_added_after_wrap_is_refused_before_the_model_runs(
    mode: str, change: str, model: str
) -> None:
    """``agent.tools.append(...)`` on the wrapped agent, or ``agent.clone(tools=...)`` of it (which keeps the
    adapter's guardrails, so ``wrap`` took it as wrapped): the model was offered the hosted tool."""

    def add_mcp(agent: Agent[Any]) -> Agent[Any]:
        if change == "appended":
            agent.tools.append(MCP)
            return agent
        return agent.clone(tools=[*agent.tools, MCP])

    out = run([[mcp_call(), *answer("Here it is.")]], mode, model, change=add_mcp)
    assert isinstance(out.error, ValueError)
    assert "HostedMCPTool 'hosted_mcp' runs outside this process" in str(out.error)
    assert out.model.calls == ()  # refused before the model was asked


@pytest.mark.parametrize("mode", ["run", "streamed"])
def test_a_function_tool_or_handoff_added_after_wrap_is_refused(mode: str) -> None:
    shop = Shop()

    @function_tool
    def wipe() -> str:
        """Wipe everything."""
        shop.ran("wipe")
        return "wiped"

    guarded = AgentGuard(make_guard())
    agent = guarded.wrap(Agent(name="shop", model=ScriptedModel([calls(("wipe", {})), answer("Done.")])))
    with_tool = agent.clone(tools=[*agent.tools, wipe])
    with_handoff = agent.clone(handoffs=[*agent.handoffs, Agent(name="Rogue")])
    with pytest.raises(ValueError, match="function tool 'wipe' was added after wrap"):
        guarded.wrap(with_tool)
    with pytest.raises(ValueError, match="the handoff to 'Rogue' was added after wrap"):
        guarded.wrap(with_handoff)

    async def go() -> None:
        if mode == "run":
            await Runner.run(with_tool, "Wipe it", hooks=guarded.hooks)
            return
        async for _ in Runner.run_streamed(with_tool, "Wipe it", hooks=guarded.hooks).stream_events():
            pass

    with guarded.guard.engagement(), pytest.raises(ValueError, match="'wipe' was added after wrap"):
        asyncio.run(go())
    assert shop.runs == {}


@pytest.mark.parametrize("mode", [*MODES, "streamed-unchecked"])
def test_a_response_showing_its_provider_ran_a_tool_ends_the_run_before_its_result_reaches_anyone(
    mode: str,
) -> None:
    """A hosted tool the agent got elsewhere than its tools (a stored prompt, or a provider behind a proxy): the
    adapter never saw it. The response is refused before the SDK makes items or events of it, whether or not the
    guard checks answers."""
    output = [mcp_call(), *answer("Here it is.")]
    guard = Guard.from_yaml(UNCHECKED) if mode == "streamed-unchecked" else None
    step = streamed(output) if mode.startswith("streamed") else output
    out = run([step], mode.removesuffix("-unchecked"), "held", guard=guard)
    assert isinstance(out.error, ValueError)
    assert "provider ran a hosted tool (mcp_call 'search')" in str(out.error)
    assert reachable(out.error, "SECRET") == []
    assert [event for event in out.events if "SECRET" in event] == []
    assert all("SECRET" not in response for response in out.hooks.responses)
    assert "SECRET" not in out.session


@pytest.mark.parametrize("mode", ["run", "run_sync"])
def test_a_model_given_by_name_is_refused_by_the_hooks(mode: str) -> None:
    """A model the adapter does not hold: ``guarded.hooks`` refuses the response before the SDK makes items of it
    (the app's own hooks have seen it by then; streamed, so has the caller: see the README)."""
    out = run([[mcp_call(), *answer("Here it is.")]], mode, "by-name")
    assert isinstance(out.error, ValueError)
    assert "provider ran a hosted tool" in str(out.error)
    assert reachable(out.error, "SECRET") == []
    assert "SECRET" not in out.session
