"""What reaches the model as the user's words goes through the input guardrail, however it is sent: under an
earlier message's id, or in a content block other than ``type: "text"``."""

from __future__ import annotations

from typing import Any

import pytest
from agentguard_langchain._content import message_text, with_text
from agentguard_langchain.testing import answer
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage

from agentguard import Engagement, GuardrailViolation
from integrations.langchain.tests.conftest import BuildAgent, config, user_says

CARD = "my card is 4111 1111 1111 1111"
"""What the shop spec's input guardrail (pii-check) stops."""

TEXT_BLOCKS = [
    ("text-plain", "text"),  # LangChain's standard plain-text block
    ("input_text", "text"),  # OpenAI's Responses API
    ("document", "content"),  # a block's string content, which create_agent reads as text too
]
"""(type, field) of blocks whose text a model is sent."""


def test_a_message_sent_again_under_an_earlier_id_is_checked_again(build_agent: BuildAgent) -> None:
    """LangGraph puts a message with an existing id in that message's place: the model reads the new text."""
    h = build_agent([answer("hi"), answer("noted")])
    first = h.agent.invoke(user_says("hello"), config())
    earlier = first["messages"][0].id

    with pytest.raises(GuardrailViolation):
        h.agent.invoke({"messages": [{"role": "user", "content": CARD, "id": earlier}]}, config())
    assert all("4111" not in str(m.content) for batch in h.model.received for m in batch)


def test_an_edit_that_passes_drops_the_rewrite_of_the_text_it_replaced(
    build_agent: BuildAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Engagement, "check_input", lambda self, text: text.replace("secret", "[x]"))
    h = build_agent([answer("hi"), answer("noted")])
    earlier = h.agent.invoke(user_says("my secret"), config())["messages"][0].id
    h.agent.invoke({"messages": [{"role": "user", "content": "hello again", "id": earlier}]}, config())
    assert [m.content for m in h.model.received[1] if isinstance(m, HumanMessage)] == ["hello again"]


@pytest.mark.parametrize("role", ["user", "human", "User"])
def test_a_chat_message_in_the_user_role_goes_through_the_input_guardrail(
    build_agent: BuildAgent, role: str
) -> None:
    """``ChatMessage(role="user")`` is a user turn to a chat model; only ``HumanMessage`` was checked."""
    h = build_agent([answer("never")])
    with pytest.raises(GuardrailViolation):
        h.agent.invoke({"messages": [ChatMessage(role=role, content=CARD)]}, config())
    assert h.model.received == []


@pytest.mark.parametrize(("kind", "field"), TEXT_BLOCKS)
def test_user_text_in_any_block_goes_through_the_input_guardrail(
    build_agent: BuildAgent, kind: str, field: str
) -> None:
    h = build_agent([answer("never")])
    with pytest.raises(GuardrailViolation):
        h.agent.invoke({"messages": [HumanMessage(content=[{"type": kind, field: CARD}])]}, config())
    assert h.model.received == []


@pytest.mark.parametrize(("kind", "field"), TEXT_BLOCKS)
def test_an_answer_in_any_block_goes_through_the_output_guardrail(
    build_agent: BuildAgent, kind: str, field: str
) -> None:
    h = build_agent([AIMessage(content=[{"type": kind, field: "a stupid question"}])])
    with pytest.raises(GuardrailViolation):
        h.agent.invoke(user_says("hello"), config())
    state = h.agent.get_state(config())
    assert all("stupid" not in str(m.content) for m in state.values.get("messages", []))


text_blocks = st.builds(
    lambda kind, field, text: {"type": kind, field: text},
    st.sampled_from(["text", "text-plain", "input_text", "document"]),
    st.sampled_from(["text", "content"]),
    st.text(max_size=5),
)
other_blocks = st.builds(
    lambda kind: {"type": kind, "url": "https://x/y.png"}, st.sampled_from(["image", "file"])
)


@given(st.lists(st.one_of(st.text(max_size=5), text_blocks, other_blocks), max_size=5), st.text(max_size=8))
def test_rewritten_text_leaves_no_block_of_the_old_text(content: list[Any], new: str) -> None:
    """A guardrail's rewrite replaces every block the check read; the blocks it did not read stay, in order."""
    message = with_text(HumanMessage(content=content), new)
    assert message_text(message) == new
    assert [b for b in message.content if isinstance(b, dict) and "url" in b] == [
        b for b in content if isinstance(b, dict) and "url" in b
    ]
