"""Engagements per thread: identity, lifetime across turns, ``retain_memory: false``, closing, eviction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentguard_langchain import user_from_context
from agentguard_langchain.testing import answer, calls

from agentguard import EngagementStatus, User
from integrations.langchain.tests.conftest import BuildAgent, config, user_says


@dataclass
class Context:
    user_id: str
    user_email: str | None = None


def test_engagement_continues_across_turns_of_a_thread(build_agent: BuildAgent) -> None:
    h = build_agent(
        [
            calls(("lookup_order", {"order_id": "A-1"})),
            answer("shipped"),
            calls(("lookup_order", {"order_id": "A-2"})),
            answer("also"),
        ]
    )
    h.agent.invoke(user_says("A-1?"), config())
    first = h.middleware.engagement_for("t1")
    h.agent.invoke(user_says("A-2?"), config())
    assert h.middleware.engagement_for("t1") is first
    assert first is not None
    assert first.view()["history"]["_total"] == 2
    assert len({s.turn_id for s in first.steps}) == 2  # a new turn per run
    assert len(h.model.received[2]) == 5  # the model saw the whole thread


def test_retain_memory_false_opens_a_fresh_engagement_and_hides_earlier_messages(
    build_agent: BuildAgent,
) -> None:
    h = build_agent(
        [
            calls(("lookup_order", {"order_id": "A-1"})),
            answer("A-1 shipped"),
            calls(("lookup_order", {"order_id": "A-2"})),
            answer("A-2 shipped"),
        ],
        retain=False,
    )
    h.agent.invoke(user_says("secret: my order is A-1"), config())
    first = h.middleware.engagement_for("t1")
    assert first is not None
    h.agent.invoke(user_says("and A-2?"), config())
    second = h.middleware.engagement_for("t1")

    assert second is not None
    assert second is not first
    assert first.status is EngagementStatus.CLOSED
    assert second.id.startswith("t1:")
    assert second.state.metadata["thread_id"] == "t1"
    assert second.view()["history"]["_list"] == ["lookup-order"]
    # the checkpointer still holds the first run, but the model never sees it again
    state_messages = h.agent.get_state(config()).values["messages"]
    assert any("secret" in str(m.content) for m in state_messages)
    for batch in h.model.received[2:]:
        assert all("secret" not in str(m.content) and "A-1" not in str(m.content) for m in batch)
    assert [m.content for m in h.model.received[2]] == ["and A-2?"]
    assert len(h.model.received[3]) == 3  # question, tool call, tool result of this engagement only


def test_retain_memory_false_hides_earlier_messages_on_resume(build_agent: BuildAgent) -> None:
    from langgraph.types import Command

    h = build_agent(
        [answer("hello"), calls(("refund", {"order_id": "A-1", "amount": 5})), answer("refunded")],
        retain=False,
    )
    h.agent.invoke(user_says("earlier secret"), config())
    h.agent.invoke(user_says("refund A-1"), config())
    h.agent.invoke(Command(resume="approve"), config())
    assert h.shop.runs["refund"] == 1
    assert all("earlier secret" not in str(m.content) for batch in h.model.received[1:] for m in batch)


def test_user_from_context_object_dict_and_resolver(build_agent: BuildAgent) -> None:
    assert user_from_context(Context("u-1", "a@corp.com")) == User("u-1", "a@corp.com")
    assert user_from_context({"user_id": 7}) == User("7")
    assert user_from_context({"user": User("u-2")}) == User("u-2")
    assert user_from_context({"other": 1}) is None
    assert user_from_context(None) is None

    h = build_agent([answer("hi")], user=lambda context: User(id=f"resolved-{context['tenant']}"))
    h.agent.invoke(user_says("hello"), config(), context={"tenant": "acme"})
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.user == User("resolved-acme")


def test_engagement_key_option(build_agent: BuildAgent) -> None:
    def by_conversation(cfg: Any) -> str:
        return f"conv-{cfg['configurable']['conversation']}"

    h = build_agent([answer("one"), answer("two")], engagement_key=by_conversation, checkpointer=False)
    h.agent.invoke(user_says("a"), {"configurable": {"conversation": "x"}})
    h.agent.invoke(user_says("b"), {"configurable": {"conversation": "x"}})
    eng = h.middleware.engagement_for("conv-x")
    assert eng is not None
    assert eng.id == "conv-x"
    assert len([s for s in eng.steps if s.name == "user"]) == 2


def test_run_without_a_thread_gets_its_own_engagement_closed_at_the_end(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("lookup_order", {"order_id": "A-1"})), answer("one"), answer("two")], checkpointer=False
    )
    h.agent.invoke(user_says("a"))
    first = h.middleware.last_engagement
    h.agent.invoke(user_says("b"))
    second = h.middleware.last_engagement
    assert first is not None
    assert second is not None
    assert first is not second
    assert first.status is EngagementStatus.CLOSED
    assert second.status is EngagementStatus.CLOSED
    assert first.view()["history"]["_total"] == 1
    assert second.view()["history"]["_total"] == 0
    assert len(h.middleware._sessions) == 0


def test_close_thread_starts_over(build_agent: BuildAgent) -> None:
    h = build_agent([answer("one"), answer("two")])
    h.agent.invoke(user_says("a"), config())
    first = h.middleware.engagement_for("t1")
    assert h.middleware.close_thread("t1") is True
    assert h.middleware.close_thread("t1") is False
    assert first is not None
    assert first.status is EngagementStatus.CLOSED
    h.agent.invoke(user_says("b"), config())
    second = h.middleware.engagement_for("t1")
    assert second is not None
    assert second is not first
    assert second.status is EngagementStatus.ACTIVE


def test_least_recently_used_engagements_are_closed(build_agent: BuildAgent) -> None:
    h = build_agent([], then=answer("ok"), max_engagements=2)
    for thread in ("a", "b", "c"):
        h.agent.invoke(user_says("hi"), config(thread))
    assert h.middleware.engagement_for("a") is None
    assert h.middleware.engagement_for("b") is not None
    assert h.middleware.engagement_for("c") is not None
    h.middleware.close()
    assert h.middleware.engagement_for("c") is None
