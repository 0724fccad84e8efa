"""``require_review`` answered through LangGraph ``interrupt()`` and ``Command(resume=...)``."""

from __future__ import annotations

from typing import Any

import pytest
from agentguard_langchain import AgentGuardMiddleware, approval_from_resume, review_payload
from agentguard_langchain._toolcall import StoredResult
from agentguard_langchain.testing import ScriptedChatModel, answer, calls
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from agentguard import Approval, ConfigurationError, Outcome, Phase, ReviewRequest, Rule
from integrations.langchain.tests.conftest import BuildAgent, Shop, config, make_guard, make_tools, user_says

APPROVE = {"decisions": [{"type": "approve"}]}


def reject(message: str) -> dict[str, Any]:
    return {"decisions": [{"type": "reject", "message": message}]}


def interrupt_value(result: dict[str, Any]) -> dict[str, Any]:
    (pending,) = result["__interrupt__"]
    value: dict[str, Any] = pending.value
    return value


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def test_input_review_pauses_and_approval_runs_the_tool_once(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("refund", {"order_id": "A-1", "amount": 30})), answer("Refunded.")])
    first = h.agent.invoke(user_says("refund A-1"), config(), context={"user_id": "u-1"})

    payload = interrupt_value(first)
    assert payload["action_requests"] == [
        {
            "name": "refund",
            "args": {"order_id": "A-1", "amount": 30},
            "description": payload["action_requests"][0]["description"],
        }
    ]
    assert payload["review_configs"] == [
        {"action_name": "refund", "allowed_decisions": ["approve", "reject"]}
    ]
    assert payload["agentguard"]["reviewer"] == "supervisor"
    assert payload["agentguard"]["phase"] == "input"
    assert "refund" in payload["action_requests"][0]["description"]
    assert h.shop.runs["refund"] == 0

    done = h.agent.invoke(
        Command(resume={"decisions": [{"type": "approve", "approved_by": "sam@corp.com"}]}), config()
    )
    assert "__interrupt__" not in done
    assert done["messages"][-1].content == "Refunded."
    assert tool_messages(done)[0].status == "success"
    assert h.shop.runs["refund"] == 1
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    step = [s for s in eng.steps if s.name == "refund"][-1]  # the paused first attempt left a step too
    review = next(d for d in step.decisions if d.rule is Rule.REVIEW)
    assert review.outcome is Outcome.REVIEW_APPROVED
    assert review.data is not None
    assert review.data["approvals"][0]["approvedBy"] == "sam@corp.com"
    assert eng.view()["history"]["_list"] == ["refund"]


def test_input_review_rejected_tells_the_model(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("refund", {"order_id": "A-1", "amount": 30})), answer("The refund was refused.")])
    h.agent.invoke(user_says("refund A-1"), config())
    done = h.agent.invoke(Command(resume=reject("not entitled")), config())

    (message,) = tool_messages(done)
    assert message.status == "error"
    assert "[review input] refund" in message.content
    assert "not entitled" in message.content
    assert h.shop.runs["refund"] == 0
    assert done["messages"][-1].content == "The refund was refused."
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["_list"] == []


def test_restriction_denies_before_anyone_is_asked(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("refund", {"order_id": "A-1", "amount": 500})), answer("Too much.")])
    result = h.agent.invoke(user_says("refund 500"), config())
    assert "__interrupt__" not in result
    assert "[restriction input] refund" in tool_messages(result)[0].content


def test_output_review_approved_releases_the_result_without_rerunning(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("export_data", {"table": "orders"})), answer("Exported.")])
    first = h.agent.invoke(user_says("export"), config())

    payload = interrupt_value(first)
    assert payload["agentguard"]["phase"] == "output"
    assert payload["agentguard"]["reviewer"] == "auditor"
    assert payload["agentguard"]["outputs"] == {"rows": ["orders-row-1", "orders-row-2"]}
    assert h.shop.runs["export_data"] == 1
    assert len(h.model.received) == 1  # the model has not seen the result

    done = h.agent.invoke(Command(resume=APPROVE), config())
    assert h.shop.runs["export_data"] == 1  # resumed, not re-run
    (message,) = tool_messages(done)
    assert message.status == "success"
    assert "orders-row-1" in message.content
    assert done["messages"][-1].content == "Exported."


def test_output_review_rejected_withholds_the_result(build_agent: BuildAgent) -> None:
    h = build_agent([calls(("export_data", {"table": "orders"})), answer("Not allowed.")])
    h.agent.invoke(user_says("export"), config())
    done = h.agent.invoke(Command(resume=reject("contains personal data")), config())

    (message,) = tool_messages(done)
    assert message.status == "error"
    assert "withheld" in message.content
    assert "orders-row" not in message.content
    assert h.shop.runs["export_data"] == 1
    assert all("orders-row" not in str(m.content) for batch in h.model.received for m in batch)
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    assert eng.view()["history"]["export-data"][0]["outputs"] is None


@pytest.mark.parametrize("second", ["approve", "reject"])
def test_input_and_output_review_of_one_call(build_agent: BuildAgent, second: str) -> None:
    h = build_agent([calls(("wire_money", {"to": "ACME", "amount": 10})), answer("Done.")])
    first = h.agent.invoke(user_says("wire 10 to ACME"), config())
    assert interrupt_value(first)["agentguard"]["phase"] == "input"
    assert h.shop.runs["wire_money"] == 0

    middle = h.agent.invoke(Command(resume=APPROVE), config())
    assert interrupt_value(middle)["agentguard"]["phase"] == "output"
    assert interrupt_value(middle)["agentguard"]["outputs"]["reference"] == "W-1"
    assert h.shop.runs["wire_money"] == 1

    done = h.agent.invoke(Command(resume=APPROVE if second == "approve" else reject("no")), config())
    assert "__interrupt__" not in done
    assert h.shop.runs["wire_money"] == 1
    (message,) = tool_messages(done)
    if second == "approve":
        assert message.status == "success"
        assert "W-1" in message.content
    else:
        assert message.status == "error"
        assert "W-1" not in message.content
    eng = h.middleware.engagement_for("t1")
    assert eng is not None
    step = [s for s in eng.steps if s.name == "wire-money"][-1]
    reviews = [(d.phase, d.outcome) for d in step.decisions if d.rule is Rule.REVIEW]
    assert reviews == [
        (Phase.INPUT, Outcome.REVIEW_APPROVED),
        (Phase.OUTPUT, Outcome.REVIEW_PENDING),  # the run paused for the output review...
        (
            Phase.OUTPUT,
            Outcome.REVIEW_APPROVED if second == "approve" else Outcome.REVIEW_REJECTED,
        ),  # ...and resumed
    ]


def test_a_registered_reviewer_is_used_instead_of_an_interrupt(build_agent: BuildAgent) -> None:
    asked: list[ReviewRequest] = []

    def supervisor(request: ReviewRequest) -> Approval:
        asked.append(request)
        return Approval(True, "fine", "bot")

    guard = make_guard(reviewers={"supervisor": supervisor})
    h = build_agent([calls(("refund", {"order_id": "A-1", "amount": 30})), answer("ok")], guard=guard)
    result = h.agent.invoke(user_says("refund"), config())
    assert "__interrupt__" not in result
    assert len(asked) == 1
    assert asked[0].call_id == tool_messages(result)[0].tool_call_id
    assert h.middleware.interrupt_reviewers == ("auditor",)


def test_interrupt_reviews_can_be_turned_off(build_agent: BuildAgent) -> None:
    h = build_agent(
        [calls(("refund", {"order_id": "A-1", "amount": 30})), answer("ok")], interrupt_reviews=False
    )
    # without interrupts nobody answers the spec's reviews: the run cannot start
    with pytest.raises(ConfigurationError, match="reviewer 'supervisor'"):
        h.agent.invoke(user_says("refund"), config())


@pytest.mark.parametrize(
    ("value", "approved", "by", "reason"),
    [
        ({"decisions": [{"type": "approve"}]}, True, "supervisor", None),
        ({"type": "approve", "approved_by": "sam"}, True, "sam", None),
        ({"type": "reject", "message": "no"}, False, "supervisor", "no"),
        ({"type": "reject"}, False, "supervisor", "rejected by the reviewer"),
        ("approve", True, "supervisor", None),
        (True, True, "supervisor", None),
        (False, False, "supervisor", None),
        (
            {"type": "edit", "edited_action": {}},
            False,
            "supervisor",
            "review decision 'edit' is not supported",
        ),
        ({"decisions": []}, False, "supervisor", "unrecognised review answer"),
        (42, False, "supervisor", "unrecognised review answer"),
    ],
)
def test_resume_values_become_approvals(value: object, approved: bool, by: str, reason: str | None) -> None:
    approval = approval_from_resume(value, "supervisor")
    assert approval.approved is approved
    assert approval.approved_by == by
    if reason is None:
        assert approval.reason is None
    else:
        assert approval.reason is not None
        assert approval.reason.startswith(reason)


def test_an_approval_passes_through() -> None:
    given = Approval(True, "ok", "sam")
    assert approval_from_resume(given, "supervisor") is given


def test_payload_without_a_tool_scope_uses_the_capability() -> None:
    request = ReviewRequest(
        reviewer="auditor",
        capability="export-data",
        phase=Phase.OUTPUT,
        message="May it?",
        execution_id="e1",
        inputs={"table": "t"},
        outputs={"rows": [1]},
        engagement={},
    )
    payload = review_payload(request)
    assert payload["action_requests"][0]["name"] == "export-data"
    assert payload["agentguard"]["outputs"] == {"rows": [1]}
    assert "Result:" in payload["action_requests"][0]["description"]


def test_review_gates_added_to_the_guard_are_answered_by_interrupt(build_agent: BuildAgent) -> None:
    guard = make_guard()
    guard.add_review_gate("lookup-order", "desk")
    h = build_agent([calls(("lookup_order", {"order_id": "A-1"})), answer("ok")], guard=guard)
    first = h.agent.invoke(user_says("look"), config())
    assert interrupt_value(first)["agentguard"]["reviewer"] == "desk"
    assert "desk" in h.middleware.interrupt_reviewers
    done = h.agent.invoke(Command(resume=APPROVE), config())
    assert tool_messages(done)[0].status == "success"
    assert h.shop.runs["lookup_order"] == 1


class Workers:
    """Two workers of one deployment: each its own Guard and middleware (its own memory), sharing the
    checkpointer and the store, as LangGraph Platform workers do."""

    def __init__(self, script: list[Any], *, store: bool = True) -> None:
        self.shop = Shop()
        self.shop.tools = make_tools(self.shop)
        self.model = ScriptedChatModel(script=script)
        self.checkpointer = InMemorySaver()
        self.store = InMemoryStore() if store else None
        self.agents = [self._agent() for _ in range(2)]

    def _agent(self) -> Any:
        return create_agent(
            self.model,
            tools=self.shop.tools,
            middleware=[AgentGuardMiddleware(make_guard())],
            checkpointer=self.checkpointer,
            store=self.store,
        )

    def held(self) -> list[Any]:
        assert self.store is not None
        return self.store.search((StoredResult.NAMESPACE,))


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_resume_on_another_worker_does_not_run_the_tool_again(decision: str) -> None:
    w = Workers([calls(("export_data", {"table": "orders"})), answer("Done.")])
    first = w.agents[0].invoke(user_says("export"), config())
    assert interrupt_value(first)["agentguard"]["phase"] == "output"
    assert w.shop.runs["export_data"] == 1
    assert len(w.held()) == 1  # kept for whichever worker resumes

    done = w.agents[1].invoke(Command(resume=APPROVE if decision == "approve" else reject("no")), config())
    assert w.shop.runs["export_data"] == 1  # the other worker did not run it again
    (message,) = tool_messages(done)
    if decision == "approve":
        assert message.status == "success"
        assert "orders-row-1" in message.content
    else:
        assert message.status == "error"
        assert "orders-row" not in message.content
    assert w.held() == []  # the review is over


async def test_an_async_resume_on_another_worker_does_not_run_the_tool_again() -> None:
    w = Workers([calls(("wire_money", {"to": "ACME", "amount": 10})), answer("Wired.")])
    first = await w.agents[0].ainvoke(user_says("wire 10 to ACME"), config())
    assert interrupt_value(first)["agentguard"]["phase"] == "input"
    middle = await w.agents[1].ainvoke(Command(resume=APPROVE), config())  # input approved on worker 2
    assert interrupt_value(middle)["agentguard"]["phase"] == "output"
    assert w.shop.runs["wire_money"] == 1
    done = await w.agents[0].ainvoke(Command(resume=APPROVE), config())  # output approved on worker 1
    assert w.shop.runs["wire_money"] == 1
    (message,) = tool_messages(done)
    assert message.status == "success"
    assert "W-1" in message.content
    assert w.held() == []


def test_a_resume_on_the_same_worker_leaves_no_stored_result() -> None:
    w = Workers([calls(("export_data", {"table": "orders"})), answer("Done.")])
    w.agents[0].invoke(user_says("export"), config())
    done = w.agents[0].invoke(Command(resume=APPROVE), config())
    assert w.shop.runs["export_data"] == 1
    assert tool_messages(done)[0].status == "success"
    assert w.held() == []


def test_only_calls_paused_after_the_tool_ran_are_stored() -> None:
    w = Workers(
        [
            calls(("lookup_order", {"order_id": "A-1"})),
            calls(("refund", {"order_id": "A-1", "amount": 5})),
            answer("ok"),
        ]
    )
    first = w.agents[0].invoke(user_says("refund A-1"), config())
    assert interrupt_value(first)["agentguard"]["phase"] == "input"  # the refund has not run
    assert w.held() == []
