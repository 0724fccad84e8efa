"""``AgentGuardCallbackHandler``: records for any runnable; guardrails when ``raise_error=True``."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from agentguard_langchain import AgentGuardCallbackHandler
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import ChatMessage, HumanMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import tool

from agentguard import ConfigurationError, GuardrailViolation, Outcome, User, ValueLimits
from integrations.langchain.tests.conftest import BuildAgent, config, make_guard, user_says


class Docs(BaseRetriever):
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [
            Document(page_content=f"about {query}", id="kb-1", metadata={"source": "kb"}),
            Document("second"),
        ]


REFUSING = {"supervisor": lambda request: False, "auditor": lambda request: False}
"""Reviewers for the spec's review gates (a guard does not start without them); no test here asks them."""


@tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look an order up."""
    return {"order_id": order_id, "status": "shipped"}


@tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return "sent"


def test_observe_records_messages_tools_and_retrievals() -> None:
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("It shipped.")])
    with guard.engagement(user=User("u-1")) as eng:
        handler = AgentGuardCallbackHandler(guard)
        cfg: Any = {"callbacks": [handler]}
        model.invoke([HumanMessage("where is A-1?", id="h1")], cfg)
        lookup_order.invoke({"order_id": "A-1"}, cfg)
        Docs().invoke("refunds", cfg)
        assert handler.engagement is eng

    kinds = [(s.kind, s.name) for s in eng.steps]
    assert kinds == [
        ("steps/message", "user"),
        ("steps/message", "agent"),
        ("steps/toolCallRequest", "lookup-order"),
        ("steps/knowledgeRetrieval", None),
    ]
    assert eng.view()["history"]["lookup-order"][0]["outputs"] == {"order_id": "A-1", "status": "shipped"}
    retrieval = eng.steps[-1].aos[0]["params"]["knowledgeStep"]
    assert retrieval["query"] == "refunds"
    assert retrieval["results"][0] == {"id": "kb-1", "content": "about refunds", "metadata": {"source": "kb"}}
    assert retrieval["results"][1]["id"] == "1"


def test_observe_records_a_tool_artifact_as_the_middleware_checks_it() -> None:
    @tool(response_format="content_and_artifact")
    def lookup_order(order_id: str) -> tuple[str, dict[str, str]]:
        """Look an order up."""
        return "shipped", {"order_id": order_id, "carrier": "DHL"}

    guard = make_guard(reviewers=REFUSING)
    with guard.engagement() as eng:
        cfg: Any = {"callbacks": [AgentGuardCallbackHandler(guard)]}
        call = {"name": "lookup_order", "args": {"order_id": "A-1"}, "id": "c1", "type": "tool_call"}
        assert lookup_order.invoke(call, cfg).artifact == {"order_id": "A-1", "carrier": "DHL"}
    outputs = eng.view()["history"]["lookup-order"][0]["outputs"]
    assert outputs == {"content": "shipped", "artifact": {"order_id": "A-1", "carrier": "DHL"}}


def test_observe_never_breaks_the_host(caplog: pytest.LogCaptureFixture) -> None:
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("a stupid answer")])
    with guard.engagement() as eng:
        cfg: Any = {"callbacks": [AgentGuardCallbackHandler(guard)]}
        with caplog.at_level(logging.WARNING, logger="agentguard_langchain"):
            send_email.invoke({"to": "eve@evil.test", "body": "x"}, cfg)  # would be refused: logged
            assert model.invoke("card 4111", cfg).content == "a stupid answer"  # no guardrail in observe mode
    assert any("would be refused" in r.getMessage() for r in caplog.records)
    denied = [s for s in eng.steps if s.name == "send-email"]
    assert denied
    assert denied[0].outcome is Outcome.DENY


def test_raise_mode_enforces_the_input_guardrail() -> None:
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("never")])
    with guard.engagement():
        cfg: Any = {"callbacks": [AgentGuardCallbackHandler(guard, raise_error=True)]}
        with pytest.raises(GuardrailViolation):
            model.invoke("my card 4111 1111", cfg)
    assert model.received == []


@pytest.mark.parametrize(
    "second",
    [
        HumanMessage("my card 4111 1111", id="h1"),
        ChatMessage(role="user", content="my card 4111 1111", id="h2"),
    ],
)
def test_raise_mode_checks_what_a_known_id_or_a_chat_message_in_the_user_role_brings(second: Any) -> None:
    """The handler knew user messages by id alone (an earlier id with new text went unchecked), and read only
    ``HumanMessage``s (``ChatMessage(role="user")`` is a user turn to a chat model)."""
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("hi"), answer("never")])
    with guard.engagement():
        cfg: Any = {"callbacks": [AgentGuardCallbackHandler(guard, raise_error=True)]}
        model.invoke([HumanMessage("hello", id="h1")], cfg)
        with pytest.raises(GuardrailViolation):
            model.invoke([second], cfg)
    assert len(model.received) == 1


@pytest.mark.parametrize(
    "hidden",
    [
        [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "card 4111 1111"}],
            }
        ],
        [{"type": "text", "text": "hello"}, {"type": "reasoning", "reasoning": "card 4111 1111"}],
    ],
    ids=["tool_result-blocks", "reasoning-block"],
)
def test_raise_mode_reads_the_text_nested_in_a_user_messages_blocks(hidden: Any) -> None:
    """A user turn's content blocks may nest text (Anthropic sends tool results as a user turn's
    ``tool_result`` blocks, each a list of text blocks): the handler read only the top-level text."""
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("never")])
    with guard.engagement():
        cfg: Any = {"callbacks": [AgentGuardCallbackHandler(guard, raise_error=True)]}
        with pytest.raises(GuardrailViolation):
            model.invoke([HumanMessage(hidden, id="h1")], cfg)
    assert model.received == []


def test_raise_mode_enforces_the_output_guardrail() -> None:
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("stupid")])
    with guard.engagement(), pytest.raises(GuardrailViolation):
        model.invoke("hi", {"callbacks": [AgentGuardCallbackHandler(guard, raise_error=True)]})


def test_handler_opens_its_own_engagement_when_none_is_open() -> None:
    guard = make_guard(reviewers=REFUSING)
    handler = AgentGuardCallbackHandler(guard, user=User("u-9"))
    ScriptedChatModel(script=[answer("ok")]).invoke("hello", {"callbacks": [handler]})
    eng = handler.engagement
    assert eng.user == User("u-9")
    assert [s.name for s in eng.steps] == ["user", "agent"]
    handler.close()
    assert eng.status.value == "closed"


def test_handler_does_not_double_record_steps_the_middleware_guards(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("shipped")])
    handler = AgentGuardCallbackHandler(h.guard)
    h.agent.invoke(user_says("where?"), {**config(), "callbacks": [handler]})
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert [(s.kind, s.name) for s in eng.steps] == [
        ("steps/message", "user"),
        ("steps/toolCallRequest", "lookup-order"),
        ("steps/message", "agent"),
    ]
    assert handler._own is None  # it recorded nothing of its own


def test_tool_errors_are_recorded_and_the_error_still_reaches_the_host() -> None:
    guard = make_guard(reviewers=REFUSING)

    @tool
    def lookup_order(order_id: str) -> str:
        """Fails."""
        raise RuntimeError("backend down")

    with guard.engagement() as eng:
        with pytest.raises(RuntimeError, match="backend down"):
            lookup_order.invoke({"order_id": "A-1"}, {"callbacks": [AgentGuardCallbackHandler(guard)]})
        assert eng.state.calls[-1].status == "failed"


def _nested(depth: int) -> object:
    value: object = {"type": "text", "text": "x"}
    for _ in range(depth):
        value = {"type": "text", "text": "x", "more": [value]}
    return value


@pytest.mark.parametrize("depth", [150, 2000])
def test_raise_mode_a_message_too_deep_to_read_fails_the_guardrail(depth: int) -> None:
    """The handler read a user message unbounded: one nested 2,000 deep ended ``on_chat_model_start`` with a
    RecursionError, and one within Python's limit was read however large. It reads as the middleware does,
    whole or not at all, within its ``value_limits``."""
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("never")])
    with guard.engagement() as eng:
        cfg: Any = {"callbacks": [AgentGuardCallbackHandler(guard, raise_error=True)]}
        with pytest.raises(GuardrailViolation, match="cannot be read whole"):
            model.invoke([HumanMessage([_nested(depth)], id="h1")], cfg)
    assert model.received == []
    assert eng.status.value == "cancelled"
    assert any("cannot be read whole" in d.reason for d in eng.decisions)


def test_raise_mode_the_bounds_are_the_handlers_value_limits() -> None:
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("ok"), answer("never")])
    message = HumanMessage([_nested(20)], id="h1")
    with guard.engagement():
        roomy: Any = {"callbacks": [AgentGuardCallbackHandler(guard, raise_error=True)]}
        model.invoke([message], roomy)  # within the default 100 levels
    with guard.engagement():
        tight = AgentGuardCallbackHandler(guard, raise_error=True, value_limits=ValueLimits(max_depth=10))
        with pytest.raises(GuardrailViolation, match="max_depth"):
            model.invoke([message], {"callbacks": [tight]})
    with pytest.raises(ConfigurationError):
        AgentGuardCallbackHandler(guard, value_limits={"max_depth": 10})  # type: ignore[arg-type]


def test_observe_mode_a_message_too_deep_to_read_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    guard = make_guard(reviewers=REFUSING)
    model = ScriptedChatModel(script=[answer("ok")])
    with caplog.at_level(logging.WARNING, logger="agentguard_langchain"), guard.engagement() as eng:
        model.invoke(
            [HumanMessage([_nested(150)], id="h1")], {"callbacks": [AgentGuardCallbackHandler(guard)]}
        )
    assert "would be refused" in caplog.text
    assert "max_depth" in caplog.text
    assert eng.status.value != "cancelled"
