"""A tool with ``return_direct=True`` ends the run: ``create_agent`` makes no model call after it, and the
tool's ``ToolMessage`` is the agent's answer. It passes the output guardrail (and a guardian) as a model's
final answer does: recorded as the agent's answer step, withheld when the guardrail fails, replaced by a
notice when a guardian denies it.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import pytest
from agentguard_langchain.testing import answer, calls
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel

from agentguard import Engagement, GuardianDenied, GuardrailViolation, Outcome, Rule
from integrations.langchain.tests.conftest import BuildAgent, Harness, config, user_says

STUPID = "What a stupid question."
MODES = ["invoke", "ainvoke", "stream", "astream"]


def finish_tool(text: str, *, status: str = "success") -> BaseTool:
    """``finish``: answers the user directly with a ``ToolMessage`` of ``text``."""

    @tool(return_direct=True)
    def finish(topic: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Answer the user directly."""
        return ToolMessage(text, tool_call_id=tool_call_id, status=status)

    return finish


def build(build_agent: BuildAgent, script: list[Any], *tools: BaseTool, **options: Any) -> Harness:
    names = {t.name: "lookup-order" for t in tools}  # a capability without restrictions
    return build_agent(script, extra_tools=tools, tool_names=names, **options)


def run(h: Harness, mode: str) -> tuple[list[BaseMessage], BaseException | None]:
    """What the caller was handed -- the final state's messages, or every message ``stream_mode="messages"``
    streamed -- and the error that ended the run, if any."""
    got: list[BaseMessage] = []

    async def arun() -> None:
        if mode == "ainvoke":
            got.extend((await h.agent.ainvoke(user_says("hi"), config()))["messages"])
        else:
            async for message, _ in h.agent.astream(user_says("hi"), config(), stream_mode="messages"):
                got.append(message)

    try:
        if mode == "invoke":
            got.extend(h.agent.invoke(user_says("hi"), config())["messages"])
        elif mode == "stream":
            got.extend(m for m, _ in h.agent.stream(user_says("hi"), config(), stream_mode="messages"))
        else:
            asyncio.run(arun())
    except Exception as exc:
        return got, exc
    return got, None


def kept(h: Harness) -> list[BaseMessage]:
    """The thread's messages as the checkpoint keeps them (what the next run, and its model, start from)."""
    messages: list[BaseMessage] = h.agent.get_state(config()).values.get("messages", [])
    return messages


def steps(h: Harness) -> list[tuple[str, str | None, Outcome]]:
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    return [(s.kind, s.name, s.outcome) for s in eng.steps]


@pytest.mark.parametrize("mode", MODES)
def test_a_direct_answer_the_output_guardrail_stops_reaches_no_one(
    build_agent: BuildAgent, mode: str
) -> None:
    """Before, the run ended with the tool's text as its answer, and no agent message step was recorded."""
    h = build(build_agent, [calls(("finish", {"topic": "x"}))], finish_tool(STUPID))
    got, error = run(h, mode)
    assert isinstance(error, GuardrailViolation)
    assert error.capability == "toxicity-check"
    assert all("stupid" not in str(m.content) for m in [*got, *kept(h)])
    assert len(h.model.received) == 1
    assert steps(h) == [
        ("steps/message", "user", Outcome.ALLOW),
        ("steps/toolCallRequest", "lookup-order", Outcome.ALLOW),
        ("steps/message", "agent", Outcome.DENY),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_a_direct_answer_that_passes_is_the_run_s_answer(build_agent: BuildAgent, mode: str) -> None:
    h = build(build_agent, [calls(("finish", {"topic": "x"}))], finish_tool("Your order has shipped."))
    got, error = run(h, mode)
    assert error is None
    final = got[-1]
    assert isinstance(final, ToolMessage)
    assert (final.content, final.status) == ("Your order has shipped.", "success")
    assert len(h.model.received) == 1
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    (agent_step,) = [s for s in eng.steps if s.kind == "steps/message" and s.name == "agent"]
    assert [d.rule for d in agent_step.decisions] == [Rule.GUARDRAIL]


def test_a_tool_error_that_ends_the_run_is_checked_too(build_agent: BuildAgent) -> None:
    """The tool's error message is the answer the user gets: its text passes the guardrail like any other."""
    h = build(build_agent, [calls(("finish", {"topic": "x"}))], finish_tool(STUPID, status="error"))
    _, error = run(h, "invoke")
    assert isinstance(error, GuardrailViolation)
    assert all("stupid" not in str(m.content) for m in kept(h))


def test_a_denial_that_ends_the_run_is_the_agent_s_answer(build_agent: BuildAgent) -> None:
    """The call of a ``return_direct`` tool is denied (no capability for it): agentguard's denial is what the
    user reads as the answer, so it is recorded (and checked) as one."""
    h = build_agent([calls(("finish", {"topic": "x"}))], extra_tools=[finish_tool("never")])
    got, error = run(h, "invoke")
    assert error is None
    final = got[-1]
    assert isinstance(final, ToolMessage)
    assert final.status == "error"
    assert "agentguard denied this tool call" in str(final.content)
    assert steps(h)[-1] == ("steps/message", "agent", Outcome.ALLOW)


def test_the_denial_of_a_tool_the_agent_lacks_is_part_of_a_direct_answer(build_agent: BuildAgent) -> None:
    """``create_agent`` ends the run when every tool of the agent the step ran has ``return_direct``; a call of
    a tool it does not have does not count, yet its message (here agentguard's denial) is in the answer."""
    h = build(build_agent, [calls(("finish", {"topic": "x"}), ("ghost", {}))], finish_tool("Shipped."))
    got, error = run(h, "invoke")
    assert error is None
    assert [(m.name, m.status) for m in got if isinstance(m, ToolMessage)] == [
        (None, "success"),
        ("ghost", "error"),
    ]
    assert [s for s in steps(h) if s[0] == "steps/message"] == [
        ("steps/message", "user", Outcome.ALLOW),
        ("steps/message", "agent", Outcome.ALLOW),
        ("steps/message", "agent", Outcome.ALLOW),
    ]


def test_a_message_named_for_a_direct_tool_is_checked_whichever_tool_made_it(build_agent: BuildAgent) -> None:
    """``create_agent`` reads the tool a message names (when it is one of the agent's): a tool without
    ``return_direct`` whose message names ``finish`` ends the run with it."""

    @tool
    def note(text: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Take a note."""
        return ToolMessage(STUPID, tool_call_id=tool_call_id, name="finish")

    h = build(build_agent, [calls(("note", {"text": "x"})), answer("Noted.")], finish_tool("ok"), note)
    _, error = run(h, "invoke")
    assert isinstance(error, GuardrailViolation)
    assert all("stupid" not in str(m.content) for m in kept(h))


class Answer(BaseModel):
    text: str


def test_a_message_named_for_a_structured_output_tool_is_checked(build_agent: BuildAgent) -> None:
    """``create_agent`` also ends the run on a tool message named for one of its structured output tools,
    which no tool call names: a message named for no tool of the agent is checked as an answer."""

    @tool
    def note(text: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Take a note."""
        return ToolMessage(STUPID, tool_call_id=tool_call_id, name="Answer")

    h = build_agent([calls(("note", {"text": "x"})), answer("Noted.")], tool_names={"note": "lookup-order"})
    h.agent = create_agent(
        h.model,
        tools=[note],
        middleware=[h.middleware],
        response_format=ToolStrategy(Answer),
        checkpointer=InMemorySaver(),
    )
    _, error = run(h, "invoke")
    assert isinstance(error, GuardrailViolation)
    assert all("stupid" not in str(m.content) for m in kept(h))


def test_a_direct_message_is_checked_even_in_a_step_that_goes_back_to_the_model(
    build_agent: BuildAgent,
) -> None:
    """Which messages end the run is known only once every call of the step is done, and by then the tools
    node has handed them to the state and the stream: a message that may end the run is checked as an
    answer, also in a step where another tool sends the run back to the model (stricter, never looser)."""
    h = build(
        build_agent,
        [calls(("finish", {"topic": "x"}), ("lookup_order", {"order_id": "A-1"})), answer("Shipped.")],
        finish_tool(STUPID),
    )
    _, error = run(h, "invoke")
    assert isinstance(error, GuardrailViolation)
    assert all("stupid" not in str(m.content) for m in kept(h))


@pytest.fixture
def guardian_denies(monkeypatch: pytest.MonkeyPatch) -> None:
    def deny(self: Engagement, text: str) -> str:
        raise GuardianDenied("leaks an internal note", reason_code="data-leak")

    async def adeny(self: Engagement, text: str) -> str:
        deny(self, text)
        return text

    monkeypatch.setattr(Engagement, "check_output", deny)
    monkeypatch.setattr(Engagement, "acheck_output", adeny)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("guardian_denies")
def test_a_direct_answer_a_guardian_denies_becomes_a_notice(build_agent: BuildAgent, mode: str) -> None:
    h = build(build_agent, [calls(("finish", {"topic": "x"}))], finish_tool("internal note: margin 80%"))
    got, error = run(h, mode)
    assert error is None
    final = got[-1]
    assert isinstance(final, ToolMessage)
    assert str(final.content).startswith("The response was blocked by agentguard")
    assert final.status == "error"
    assert all("margin" not in str(m.content) for m in [*got, *kept(h)])
    asked = kept(h)[1]
    assert isinstance(asked, AIMessage)
    assert final.tool_call_id == asked.tool_calls[0]["id"]  # still the answer to the model's call


@pytest.mark.usefixtures("guardian_denies")
def test_a_direct_answer_a_guardian_denies_ends_the_run_under_on_denied_raise(
    build_agent: BuildAgent,
) -> None:
    h = build(
        build_agent, [calls(("finish", {"topic": "x"}))], finish_tool("internal note"), on_denied="raise"
    )
    _, error = run(h, "invoke")
    assert isinstance(error, GuardianDenied)
    assert all("internal note" not in str(m.content) for m in kept(h))


def test_a_direct_answer_the_guardrail_rewrites_is_delivered_rewritten_without_its_artifact(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guardrail saw the text, not the artifact: once it rewrote the text (a redaction), the artifact may
    hold what it took out, so it is not delivered."""
    monkeypatch.setattr(Engagement, "check_output", lambda self, text: text.replace("4111", "[card]"))

    @tool(return_direct=True, response_format="content_and_artifact")
    def finish(topic: str) -> tuple[str, dict[str, str]]:
        """Answer the user directly."""
        return "Card 4111 is on file.", {"card": "4111 1111 1111 1111"}

    h = build(build_agent, [calls(("finish", {"topic": "x"}))], finish)
    got, error = run(h, "invoke")
    assert error is None
    final = got[-1]
    assert isinstance(final, ToolMessage)
    assert (final.content, final.artifact) == ("Card [card] is on file.", None)


def test_an_artifact_of_a_direct_answer_the_guardrail_lets_out_is_delivered(build_agent: BuildAgent) -> None:
    @tool(return_direct=True, response_format="content_and_artifact")
    def finish(topic: str) -> tuple[str, dict[str, int]]:
        """Answer the user directly."""
        return "One hit.", {"hits": 1}

    h = build(build_agent, [calls(("finish", {"topic": "x"}))], finish)
    got, error = run(h, "invoke")
    assert error is None
    final = got[-1]
    assert isinstance(final, ToolMessage)
    assert (final.content, final.artifact) == ("One hit.", {"hits": 1})
