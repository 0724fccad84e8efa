"""The input guardrail reads every text a model may be sent from a message, not only its content's text.

A client's assistant message carries tool calls whose arguments the provider sends (OpenAI as JSON
``arguments``), and ``additional_kwargs`` (an OpenAI ``function_call``, ``tool_calls``, a refusal) that
langchain-core's converters send too; content blocks nest text (an Anthropic ``tool_result`` block's list of
text blocks, a ``tool_use`` block's ``input``, ``reasoning`` / ``thinking`` blocks, an OpenAI ``function_call``
block's ``arguments``, a ``json`` block, a Bedrock ``guard_content`` block); a message's ``name`` is sent
beside it. Each of those reached the model unread. And a message the session knew was known by its id, class
and content alone: the same id and content with other tool calls, ``additional_kwargs``, role or name passed
as already checked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from agentguard_langchain._content import input_text, message_text
from agentguard_langchain._middleware import INPUTS_KEY
from agentguard_langchain.testing import answer, calls
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from agentguard import Engagement, GuardrailViolation
from integrations.langchain.tests.conftest import BuildAgent, Harness, config, spy_inputs, user_says
from integrations.langchain.tests.test_lc_input_messages import restarted

NUMBER = "4111 1111 1111 1111"
"""What the shop spec's input guardrail (pii-check) stops: any text with ``4111`` in it."""


def _call(args: dict[str, Any], call_id: str = "call_h") -> dict[str, Any]:
    return {"name": "lookup_order", "args": args, "id": call_id, "type": "tool_call"}


def _arguments(secret: str) -> str:
    return json.dumps({"order_id": secret}, ensure_ascii=False)


PLACES: dict[str, Callable[[str], BaseMessage]] = {
    "tool call arguments": lambda s: AIMessage("", tool_calls=[_call({"order_id": s})]),
    "nested tool call arguments": lambda s: AIMessage(
        "Looking.", tool_calls=[_call({"filter": {"notes": ["x", {"text": s}]}})]
    ),
    "tool call name": lambda s: AIMessage("", tool_calls=[{**_call({}), "name": s}]),
    "invalid tool call arguments": lambda s: AIMessage(
        "",
        invalid_tool_calls=[
            {
                "name": "lookup_order",
                "args": _arguments(s)[:-1],
                "id": "c",
                "error": None,
                "type": "invalid_tool_call",
            }
        ],
    ),
    "additional_kwargs function_call": lambda s: AIMessage(
        "", additional_kwargs={"function_call": {"name": "lookup_order", "arguments": _arguments(s)}}
    ),
    "additional_kwargs tool_calls": lambda s: AIMessage(
        "",
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": _arguments(s)},
                }
            ]
        },
    ),
    "additional_kwargs refusal": lambda s: AIMessage("", additional_kwargs={"refusal": s}),
    "tool_result block of text blocks": lambda s: HumanMessage(
        [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": s}]}]
    ),
    "tool_use block input": lambda s: AIMessage(
        [{"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {"order_id": s}}]
    ),
    "reasoning block": lambda s: AIMessage([{"type": "reasoning", "reasoning": s}]),
    "thinking block": lambda s: AIMessage([{"type": "thinking", "thinking": s, "signature": "sig"}]),
    "function_call block": lambda s: AIMessage(
        [{"type": "function_call", "call_id": "c", "name": "lookup_order", "arguments": _arguments(s)}]
    ),
    "json block": lambda s: HumanMessage([{"type": "json", "json": {"note": s}}]),
    "guard_content block": lambda s: HumanMessage([{"type": "guard_content", "guard_content": {"text": s}}]),
    "name": lambda s: HumanMessage("hello", name=s),
    "ChatMessage role": lambda s: ChatMessage(role=s, content="hello"),
}
"""A client's message hiding ``s`` where a model is sent it, by place; its content's text does not have it."""


def seen_by_model(h: Harness) -> str:
    """Everything of every message the model was given (not only content): tool calls, kwargs, names."""
    return json.dumps(
        [m.model_dump() for batch in h.model.received for m in batch], default=str, ensure_ascii=False
    )


@pytest.mark.parametrize("place", PLACES.values(), ids=PLACES.keys())
def test_text_hidden_anywhere_a_model_is_sent_it_goes_through_the_input_guardrail(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch, place: Callable[[str], BaseMessage]
) -> None:
    """Only the content's text was read: each of these reached the model with the card in it."""
    forged = place(f"card {NUMBER}")
    assert "4111" not in message_text(forged)
    checked = spy_inputs(monkeypatch)
    h = build_agent([answer("never")])
    with pytest.raises(GuardrailViolation):
        h.agent.invoke({"messages": [forged, HumanMessage("hello")]}, config())
    assert h.model.received == []
    assert any(NUMBER in text for text in checked)


async def test_async_tool_call_arguments_go_through_the_input_guardrail(build_agent: BuildAgent) -> None:
    h = build_agent([answer("never")])
    with pytest.raises(GuardrailViolation):
        await h.agent.ainvoke(
            {"messages": [PLACES["tool call arguments"](NUMBER), HumanMessage("hello")]}, config()
        )
    assert h.model.received == []


_SAFE_TEXT = st.text(st.characters(exclude_categories=("Cs", "Cc"), exclude_characters='"\\'), max_size=12)
"""Text as a client may write it (JSON escapes quotes, backslashes and control characters in arguments)."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    place=st.sampled_from(sorted(PLACES)),
    before=_SAFE_TEXT,
    after=_SAFE_TEXT,
    position=st.integers(min_value=0, max_value=2),
    earlier_run=st.booleans(),
)
def test_the_input_guardrail_sees_a_forbidden_string_wherever_a_client_hides_it(
    build_agent: BuildAgent, place: str, before: str, after: str, position: int, earlier_run: bool
) -> None:
    """A client message hides the forbidden string in a random one of the places a model is sent text from,
    among benign messages, in a thread's first run or a later one: the guardrail reads it, and the model
    reads nothing of that run."""
    secret = f"{before}4111{after}"
    h = build_agent([answer("ok")], then=answer("ok"))
    if earlier_run:
        h.agent.invoke(user_says("hi"), config())
    messages: list[BaseMessage] = [SystemMessage("be brief"), HumanMessage("hello")]
    messages.insert(position, PLACES[place](secret))
    with pytest.MonkeyPatch.context() as patch:
        checked = spy_inputs(patch)
        with pytest.raises(GuardrailViolation):
            h.agent.invoke({"messages": messages}, config())
    assert any(secret in text for text in checked)
    assert len(h.model.received) == int(earlier_run)


# -- a known message is known by everything a model is sent of it ----------------------------------------


def _produced_call(h: Harness) -> AIMessage:
    """The model's tool-calling answer of the thread's first run (``lookup_order`` for A-1)."""
    h.agent.invoke(user_says("where is A-1?"), config())
    state = h.agent.get_state(config()).values
    (message,) = [m for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    return message


CHANGES: dict[str, Callable[[AIMessage], AIMessage]] = {
    "tool call arguments": lambda m: m.model_copy(
        update={"tool_calls": [{**m.tool_calls[0], "args": {"order_id": NUMBER}}]}
    ),
    "additional_kwargs": lambda m: m.model_copy(
        update={"additional_kwargs": {"function_call": {"name": "x", "arguments": _arguments(NUMBER)}}}
    ),
    "name": lambda m: m.model_copy(update={"name": NUMBER}),
    "invalid tool calls": lambda m: m.model_copy(
        update={"invalid_tool_calls": [{"name": "x", "args": NUMBER, "id": "c", "error": None}]}
    ),
}
"""A produced answer sent back under its id with its content unchanged, and something else a model reads
changed."""


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
@pytest.mark.parametrize("worker", ["same", "restarted"])
def test_an_answer_sent_again_with_its_content_but_other_fields_is_input(
    build_agent: BuildAgent,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[AIMessage], AIMessage],
    worker: str,
) -> None:
    """The session knew the answer by its id, class and content (and the checkpoint by its class and text):
    the card in its tool calls, kwargs or name passed as the guarded run's own. Sent back as it was (tool
    calls and all) it is the run's own, on the worker that knows it and on one that reads the checkpoint."""
    checked = spy_inputs(monkeypatch)
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("Shipped."), answer("ok")])
    produced = _produced_call(h)
    runner = h if worker == "same" else restarted(h, [answer("ok"), answer("never")])
    runner.agent.invoke({"messages": [produced, HumanMessage("thanks")]}, config())
    assert checked == ["where is A-1?", "thanks"]
    with pytest.raises(GuardrailViolation):
        runner.agent.invoke({"messages": [change(produced), HumanMessage("bye")]}, config())
    assert NUMBER not in seen_by_model(runner)


@pytest.mark.parametrize("worker", ["same", "restarted"])
def test_a_chat_message_sent_again_with_another_role_is_input(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch, worker: str
) -> None:
    """The same id and text as a developer message, then as a system message: the model reads another
    message, which the guardrail must read as such (it read it before as the developer's)."""
    checked = spy_inputs(monkeypatch)
    h = build_agent([answer("ok"), answer("ok")])
    first = ChatMessage(role="developer", content="refunds need no review", id="m1")
    h.agent.invoke({"messages": [first, HumanMessage("hi")]}, config())
    runner = h if worker == "same" else restarted(h, [answer("ok")])
    again = ChatMessage(role="system", content="refunds need no review", id="m1")
    runner.agent.invoke({"messages": [again, HumanMessage("and?")]}, config())
    assert checked == ["refunds need no review", "hi", "refunds need no review", "and?"]


def test_a_record_of_an_earlier_digest_vouches_for_nothing(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written by the adapter's earlier version names each message by its class and text alone:
    a worker of this version takes none of it for checked (it covered no tool call), and checks the thread's
    messages again (fail closed)."""
    checked = spy_inputs(monkeypatch)
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("Shipped.")])
    h.agent.invoke(user_says("where is A-1?"), config())
    messages = h.agent.get_state(config()).values["messages"]
    old = {
        m.id: [hashlib.sha256(f"{type(m).__name__}:{message_text(m)}".encode()).hexdigest(), None]
        for m in messages
    }
    h.agent.update_state(config(), {INPUTS_KEY: old})
    restarted(h, [answer("ok")]).agent.invoke(user_says("thanks"), config())
    assert checked == ["where is A-1?", *map(input_text, messages), "thanks"]
    assert len(messages) == 4  # the question, the tool call, its result, the answer: all input again


# -- a rewritten message keeps nothing the guardrail asked to change --------------------------------------


def redact(self: Engagement, text: str) -> str:
    return text.replace(NUMBER, "[card]")


def _answered(batch: Sequence[BaseMessage]) -> None:
    """Every tool result in ``batch`` answers a call of an assistant message before it (as providers require),
    and every call is answered."""
    calls_made: set[str] = set()
    for message in batch:
        if isinstance(message, AIMessage):
            calls_made |= {call["id"] for call in message.tool_calls if call["id"]}
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in calls_made
            calls_made.discard(message.tool_call_id)
    assert calls_made == set()


REWRITTEN_CALLS: dict[str, AIMessage] = {
    "tool_calls": AIMessage("Let me look.", tool_calls=[_call({"order_id": NUMBER}, "call_r")]),
    "additional_kwargs tool_calls": AIMessage(
        "Let me look.",
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "call_r",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": _arguments(NUMBER)},
                }
            ]
        },
    ),
}


@pytest.mark.parametrize("sent", REWRITTEN_CALLS.values(), ids=REWRITTEN_CALLS.keys())
def test_a_rewritten_message_that_called_tools_reaches_the_model_as_its_new_text_alone(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch, sent: AIMessage
) -> None:
    """The guardrail redacted the card in a client's tool call: the model reads the assistant message as the
    rewritten text (the calls as text), without tool calls, kwargs, or the results that answered them -- at
    this run and the thread's next one. Only the content's text was read and rewritten before: the card went
    through in the call's arguments."""
    monkeypatch.setattr(Engagement, "check_input", redact)
    h = build_agent([answer("ok"), answer("ok")])
    result = ToolMessage("shipped", tool_call_id="call_r")
    h.agent.invoke({"messages": [sent.model_copy(), result, HumanMessage("and?")]}, config())
    h.agent.invoke(user_says("thanks"), config())
    assert NUMBER not in seen_by_model(h)
    for batch in h.model.received:
        _answered(batch)
        (assistant, *_) = [m for m in batch if isinstance(m, AIMessage)]
        assert assistant.content.startswith("Let me look.\n")
        assert "[card]" in assistant.content
        assert (assistant.tool_calls, assistant.additional_kwargs) == ([], {})
        assert not any(isinstance(m, ToolMessage) for m in batch)
