"""A structured response (``create_agent(..., response_format=...)``) is the run's answer: it goes through the
output guardrail (and the guardian) like a text answer, whichever strategy the model gave it by."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agentguard_langchain import AgentGuardMiddleware
from agentguard_langchain.testing import ScriptedChatModel
from langchain.agents import create_agent
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel

from agentguard import Engagement, GuardianDenied, GuardrailViolation
from integrations.langchain.tests.conftest import config, make_guard, user_says

STRATEGIES = pytest.mark.parametrize("strategy", ["tool", "provider"])


class Reply(BaseModel):
    text: str


def structured_agent(text: str, strategy: str) -> Any:
    """An agent whose model answers ``Reply(text=text)``: as the arguments of a call to the ``Reply`` tool
    (``ToolStrategy``), or as JSON text (``ProviderStrategy``)."""
    if strategy == "tool":
        call = {"name": "Reply", "args": {"text": text}, "id": "s-1", "type": "tool_call"}
        message, response_format = AIMessage(content="", tool_calls=[call]), ToolStrategy(Reply)
    else:
        message, response_format = (
            AIMessage(content=Reply(text=text).model_dump_json()),
            ProviderStrategy(Reply),
        )
    return create_agent(
        ScriptedChatModel(script=[message]),
        tools=[],
        middleware=[AgentGuardMiddleware(make_guard())],
        response_format=response_format,
        checkpointer=InMemorySaver(),
    )


@STRATEGIES
def test_a_structured_answer_the_output_guardrail_stops_reaches_no_one(strategy: str) -> None:
    agent = structured_agent("a stupid question", strategy)
    with pytest.raises(GuardrailViolation):
        agent.invoke(user_says("hello"), config())
    values = agent.get_state(config()).values
    assert values.get("structured_response") is None
    assert "stupid" not in repr(values.get("messages"))


@STRATEGIES
def test_a_structured_answer_that_passes_is_delivered_as_the_model_gave_it(strategy: str) -> None:
    result = structured_agent("Order A-1 has shipped.", strategy).invoke(user_says("hello"), config())
    assert result["structured_response"] == Reply(text="Order A-1 has shipped.")


@STRATEGIES
def test_a_structured_answer_a_guardian_denies_becomes_a_notice(
    strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def deny(self: Engagement, text: str) -> str:
        raise GuardianDenied("leaks an internal note")

    monkeypatch.setattr(Engagement, "check_output", deny)
    result = structured_agent("internal note: ...", strategy).invoke(user_says("hello"), config())
    assert result.get("structured_response") is None
    final = result["messages"][-1]
    assert isinstance(final, AIMessage)
    assert final.content.startswith("The response was blocked by agentguard")
    assert "internal note:" not in repr(result["messages"])


@STRATEGIES
def test_a_structured_answer_the_checks_rewrite_is_delivered_as_their_text_alone(
    strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A structured response cannot carry rewritten text: the answer is the text the checks let out."""
    monkeypatch.setattr(Engagement, "check_output", lambda self, text: text.replace("4111", "[card]"))
    result = structured_agent("card 4111 is on file", strategy).invoke(user_says("hello"), config())
    assert result.get("structured_response") is None
    assert "4111" not in repr(result["messages"])
    assert json.loads(result["messages"][-1].content) == {"text": "card [card] is on file"}
