"""Streaming a guarded agent: with ``stream_mode="messages"`` LangGraph hands the model's tokens to the caller
as the model makes them -- before the output guardrail or a guardian has seen the answer. The middleware keeps
those tokens out of the stream whenever the answer is checked, and the stream carries the answer whole, as the
checks let it out (or nothing, when they stop the run)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agentguard_langchain import AgentGuardMiddleware
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from agentguard import ConfigurationError, Engagement, Guard, GuardianDenied, GuardrailViolation
from agentguard.guardian import GuardianClient
from agentguard.guardian.server import RunningServer, create_app, parse_rules, serve_in_thread
from integrations.langchain.tests.conftest import Shop, config, make_guard, make_tools, user_says

NO_PROMISES = """
default_decision: allow
rules:
  - name: no-promises
    methods: [steps/message]
    when: params.message.role == "agent" && params.message.content.exists(p, p.text.contains("guarantee"))
    decision: deny
    message: The agent may not make guarantees
"""

UNCHECKED = """
kind: openagentspec:v1/agent
name: chatty
description: The agent chats.
intent: You chat.
owner: chat@corp.com
capabilities: {}
"""


class TokenModel(ScriptedChatModel):
    """The scripted model, streaming each answer word by word when LangChain asks it to stream (as it does
    under ``stream_mode="messages"``)."""

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._next(messages)
        text = str(reply.content)
        words = text.split(" ")
        for index, word in enumerate(words):
            piece = word if index == len(words) - 1 else word + " "
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


def agent_of(guard: Guard, text: str, **options: Any) -> tuple[Any, TokenModel]:
    model = TokenModel(script=[answer(text)])
    return create_agent(model, tools=[], middleware=[AgentGuardMiddleware(guard, **options)]), model


def streamed(agent: Any, *, asynchronous: bool = False) -> tuple[list[str], BaseException | None]:
    """The text of every message chunk the stream hands the caller, and the error that ended it, if any."""
    pieces: list[str] = []

    def keep(item: Any) -> None:
        message, _ = item
        pieces.append(str(message.content))

    async def arun() -> None:
        async for item in agent.astream(user_says("hi"), stream_mode="messages"):
            keep(item)

    try:
        if asynchronous:
            asyncio.run(arun())
        else:
            for item in agent.stream(user_says("hi"), stream_mode="messages"):
                keep(item)
    except Exception as exc:
        return pieces, exc
    return pieces, None


@pytest.mark.parametrize("asynchronous", [False, True], ids=["stream", "astream"])
def test_an_answer_the_output_guardrail_stops_never_reaches_the_stream(asynchronous: bool) -> None:
    agent, model = agent_of(make_guard(), "That is a stupid question.")
    pieces, error = streamed(agent, asynchronous=asynchronous)
    assert isinstance(error, GuardrailViolation)
    assert len(model.received) == 1  # the model did answer: the guardrail stopped it, not the model
    assert all("stupid" not in piece for piece in pieces)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["stream", "astream"])
def test_a_checked_answer_is_streamed_whole_once_it_passed(asynchronous: bool) -> None:
    agent, _ = agent_of(make_guard(), "Your order has shipped today.")
    pieces, error = streamed(agent, asynchronous=asynchronous)
    assert error is None
    assert pieces[-1] == "Your order has shipped today."
    assert "Your " not in pieces  # no token went out before the guardrail had the whole answer


@pytest.mark.parametrize("asynchronous", [False, True], ids=["stream", "astream"])
def test_an_answer_a_guardian_replaces_is_streamed_as_replaced(
    asynchronous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    def deny(self: Engagement, text: str) -> str:
        raise GuardianDenied("leaks a confidential figure", reason_code="data-leak")

    async def adeny(self: Engagement, text: str) -> str:
        raise GuardianDenied("leaks a confidential figure", reason_code="data-leak")

    monkeypatch.setattr(Engagement, "check_output", deny)
    monkeypatch.setattr(Engagement, "acheck_output", adeny)
    agent, _ = agent_of(make_guard(), "internal note: the margin is 80 percent")
    pieces, error = streamed(agent, asynchronous=asynchronous)
    assert error is None
    assert all("margin" not in piece and "80" not in piece for piece in pieces)
    assert pieces[-1].startswith("The response was blocked by agentguard")


@pytest.fixture(scope="module")
def guardian() -> Iterator[RunningServer]:
    with serve_in_thread(create_app(parse_rules(NO_PROMISES))) as server:
        yield server


@pytest.mark.parametrize("asynchronous", [False, True], ids=["stream", "astream"])
def test_a_guardian_alone_keeps_the_tokens_out_of_the_stream_too(
    guardian: RunningServer, asynchronous: bool
) -> None:
    """No output guardrail, but a real guardian on 127.0.0.1 that denies the answer: its tokens are held."""
    agent, model = agent_of(
        Guard.from_yaml(UNCHECKED, guardian=GuardianClient(guardian.url)), "I guarantee delivery by noon."
    )
    pieces, error = streamed(agent, asynchronous=asynchronous)
    assert error is None
    assert len(model.received) == 1
    assert all("I guarantee" not in piece and "noon" not in piece for piece in pieces)
    assert pieces[-1].startswith("The response was blocked by agentguard")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["stream", "astream"])
def test_an_answer_nothing_checks_still_streams_token_by_token(asynchronous: bool) -> None:
    agent, _ = agent_of(Guard.from_yaml(UNCHECKED), "Nothing here is checked.")
    pieces, error = streamed(agent, asynchronous=asynchronous)
    assert error is None
    assert pieces[:4] == ["Nothing ", "here ", "is ", "checked."]


# -- stream_mode="tools": LangGraph streams a tool's result as the tool ends, before any check ---------------


def _search_agent() -> tuple[Any, Shop]:
    """An agent whose web_search finds five results (SECRET among them), which the spec withholds."""
    shop = Shop()
    model = ScriptedChatModel(script=[calls(("web_search", {"query": "many"})), answer("done")])
    agent = create_agent(
        model,
        tools=make_tools(shop),
        middleware=[AgentGuardMiddleware(make_guard())],
        checkpointer=InMemorySaver(),
    )
    return agent, shop


def _tools_stream(agent: Any, *, asynchronous: bool) -> tuple[list[Any], BaseException | None]:
    """Every chunk of a ``["tools", "updates"]`` stream of the search, and the error that ended it."""
    chunks: list[Any] = []

    async def consume() -> None:
        async for chunk in agent.astream(user_says("hi"), config(), stream_mode=["tools", "updates"]):
            chunks.append(chunk)

    try:
        if asynchronous:
            asyncio.run(consume())
        else:
            chunks.extend(agent.stream(user_says("hi"), config(), stream_mode=["tools", "updates"]))
    except ConfigurationError as exc:
        return chunks, exc
    return chunks, None


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_run_that_streams_tool_results_is_refused_before_a_tool_runs(asynchronous: bool) -> None:
    agent, shop = _search_agent()
    chunks, error = _tools_stream(agent, asynchronous=asynchronous)
    assert isinstance(error, ConfigurationError)
    assert 'stream_mode="tools"' in str(error)
    assert [mode for mode, _ in chunks if mode == "tools"] == []  # not even the tool's start
    assert "SECRET" not in repr(chunks)
    assert shop.runs["web_search"] == 0  # the tool never ran


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_model_inside_a_tool_does_not_stream_what_the_checks_withhold(asynchronous: bool) -> None:
    """A tool whose output a model makes (a summariser, an agent as a tool): under ``stream_mode="messages"``
    the model's tokens reached the caller as it made them, and the output restriction withheld the result
    after. The tool runs with LangGraph's nostream tag; its message (here the notice) is what is streamed."""
    inner = TokenModel(script=[answer("SECRET-a SECRET-b SECRET-c SECRET-d SECRET-e")] * 2)

    @tool
    def web_search(query: str) -> dict[str, Any]:
        """Search the web, the results summarised by a model."""
        return {"results": str(inner.invoke(query).content).split(" ")}

    model = ScriptedChatModel(script=[calls(("web_search", {"query": "x"})), answer("done")])
    agent = create_agent(
        model,
        tools=[web_search],
        middleware=[AgentGuardMiddleware(make_guard())],
        checkpointer=InMemorySaver(),
    )
    modes = ["messages", "updates"]
    chunks: list[Any] = []

    async def consume() -> None:
        async for chunk in agent.astream(user_says("hi"), config(), stream_mode=modes):
            chunks.append(chunk)

    if asynchronous:
        asyncio.run(consume())
    else:
        chunks.extend(agent.stream(user_says("hi"), config(), stream_mode=modes))
    streamed = [str(item[0].content) for mode, item in chunks if mode == "messages"]
    assert inner.received, "the tool's model ran"
    assert not [text for text in streamed if "SECRET" in text]
    assert any("result was withheld" in text for text in streamed)
    assert streamed[-1] == "done"
